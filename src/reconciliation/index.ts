/**
 * Reconciliation: every enrolled consumer re-synced, and what became of each one counted.
 * `startReconciliation` adds its job (one at a time); the job fans the consumers out in sync
 * jobs of several that carry its id (fan-out.ts); their outcomes go to its tally (tally.ts),
 * which `status` and `reconcile --wait` read. The counting rules:
 *
 * | event                                                 | tally                             |
 * | ----------------------------------------------------- | --------------------------------- |
 * | the fan-out starts (not when resumed)                 | expected = reconcilable consumers |
 * | the fan-out ends                                      | total = consumers enqueued        |
 * | a consumer's sync ends synced                         | synced + 1                        |
 * | a consumer's sync ends in ERR-404-02                  | notEnrolled + 1                   |
 * | a sync job fails for good (retries count nothing)     | failed + each of its consumers    |
 * | a consumer is left to its own pending job, or handed  | nothing here: that job is made to |
 * |   to one of its own after failing in a job of several |   carry the id and counts it      |
 * | ... its own job is running                            | nothing here: the add that        |
 * |                                                       |   deduplication keeps as its next |
 * |                                                       |   run carries the id              |
 * | ... its own job carries another reconciliation        | synced + 1 now (outcome unknown)  |
 * | synced + notEnrolled + failed reaches total           | finishedAt = now, set once        |
 *
 * A job of several counts its consumers once: when it ends, or when it is narrowed to those
 * left for its next attempt. Counting is at least once: a replica killed between an outcome and
 * its job's completion counts it again on the retry, so figures may exceed `total` by that much.
 */
import { randomBytes } from 'node:crypto';
import type { Job, Queue } from 'bullmq';
import { z } from 'zod';
import type { JobContext } from '../jobs/context.js';
import { jobNames, reconcileDeduplicationId } from '../queues/names.js';
import {
  type ReconciliationPayload,
  rewardSyncBatchPayloadSchema,
  rewardSyncPayloadSchema,
} from '../queues/payloads.js';
import type { Queues } from '../queues/queues.js';
import { countOutcomes, type TallyStore } from './tally.js';

export interface StartedReconciliation {
  jobId: string;
  /** False when a reconciliation was already pending or running: that one goes on alone. */
  started: boolean;
}

/** Starts a reconciliation unless one is already pending or running. */
export async function startReconciliation(
  queues: Queues,
  trigger: 'manual' | 'schedule' = 'manual',
): Promise<StartedReconciliation> {
  // No startedAt: the worker that first runs it sets it (status tells queued from started).
  const data: ReconciliationPayload = { trigger };
  // Our own id, so that a deduplicated add (which answers with the running job's id) shows.
  const jobId = `reconcile-${Date.now()}-${randomBytes(3).toString('hex')}`;
  const job = await queues.reconciliation.add(jobNames.reconcile, data, {
    jobId,
    deduplication: { id: reconcileDeduplicationId },
    // It resumes from its cursor: a few attempts cover a crashed replica.
    attempts: 3,
  });
  return { jobId: job.id ?? jobId, started: job.id === jobId };
}

/** Consumers whose sync ended, in a sync job of `reconciliation` (if any). */
export async function countSyncs(
  tallies: TallyStore,
  reconciliation: string | undefined,
  syncs: readonly { outcome: 'synced' | 'not_enrolled' }[],
): Promise<void> {
  if (reconciliation === undefined) return;
  const notEnrolled = syncs.filter((sync) => sync.outcome === 'not_enrolled').length;
  await countOutcomes(tallies, reconciliation, { synced: syncs.length - notEnrolled, notEnrolled });
}

const syncPayloadSchema = z.union([rewardSyncPayloadSchema, rewardSyncBatchPayloadSchema]);

/** A job that failed for good: if a sync of a reconciliation, its consumers failed there. */
export async function countFailedForGood(
  job: Job,
  ctx: Pick<JobContext, 'tallies' | 'logger'>,
): Promise<void> {
  const sync = syncPayloadSchema.safeParse(job.data).data;
  if (sync?.reconciliation === undefined) return;
  const { reconciliation } = sync;
  const failed = 'consumerIds' in sync ? sync.consumerIds.length : 1;
  await countOutcomes(ctx.tallies, reconciliation, { failed }).catch((error: Error) =>
    ctx.logger.warn(
      { jobId: job.id, reconciliation, err: { message: error.message } },
      'could not count a failed sync in its reconciliation',
    ),
  );
}

/**
 * Makes the pending own sync job of each of `consumerIds` carry `reconciliation`: being
 * deduplicated per consumer, it may be an older job, added without it. A running job needs
 * nothing (see the table). A job carrying another reconciliation keeps it; ours then counts the
 * consumer as synced now, having no other way to learn the outcome.
 */
export async function carryReconciliation(
  queue: Queue,
  tallies: TallyStore,
  consumerIds: readonly string[],
  reconciliation: string | undefined,
): Promise<void> {
  if (reconciliation === undefined) return;
  let unknowable = 0;
  for (const consumerId of consumerIds) {
    const jobId = await queue.getDeduplicationJobId(consumerId);
    const job = jobId ? await queue.getJob(jobId) : undefined;
    if (!job) continue; // ended meanwhile: its outcome is counted, or the add ran it anew
    const own = rewardSyncPayloadSchema.safeParse(job.data).data;
    if (own?.reconciliation === reconciliation || (await job.getState()) === 'active') continue;
    if (own && own.reconciliation === undefined) await job.updateData({ ...own, reconciliation });
    else unknowable += 1;
  }
  await countOutcomes(tallies, reconciliation, { synced: unknowable });
}
