/**
 * Reconciliation: every enrolled consumer re-synced, and what became of each counted.
 * `startReconciliation` adds its job, one at a time; the job fans the consumers out in sync jobs
 * that carry its id (fan-out.ts); their outcomes go to its tally (tally.ts), which `status` and
 * `reconcile --wait` read. What counts what:
 *
 * | event                                                  | tally                             |
 * | ------------------------------------------------------ | --------------------------------- |
 * | the fan-out starts (not when resumed)                  | expected = reconcilable consumers |
 * | the fan-out ends                                       | total = consumers enqueued        |
 * | a consumer's sync ends: synced / ERR-404-02            | synced + 1 / notEnrolled + 1      |
 * | a sync job fails for good (a retry counts nothing)     | failed + each of its consumers    |
 * | a consumer left to its own pending job, or handed to   | nothing: that job is made to      |
 * |   one after failing in a job of several                |   carry the id, and counts it     |
 * | ... whose own job runs: deduplication keeps our add    | nothing: that add carries the id  |
 * | ... whose own job carries another reconciliation       | synced + 1 now (outcome unknown)  |
 * | synced + notEnrolled + failed reaches total            | finishedAt = now, set once        |
 *
 * A job of several counts its consumers once: when it ends, or when narrowed for its next
 * attempt. At least once: a replica killed between an outcome and its job's completion counts it
 * again (figures may exceed `total`). An outcome no listener hears (a stalled-check failure) is
 * never counted: `status` calls it finished once its job completed and no sync job of it is left.
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
import { type TallyStore, updateTally } from './tally.js';

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
    // It resumes from its cursor, with JOB_ATTEMPTS (the queue's default) as every job: 3
    // attempts failed it for good within 15 s of PostgreSQL away.
    deduplication: { id: reconcileDeduplicationId },
  });
  return { jobId: job.id ?? jobId, started: job.id === jobId };
}

/** The cron's tick: starts a reconciliation unless one is already under way. */
export async function processReconcileTick(ctx: JobContext): Promise<StartedReconciliation> {
  const started = await startReconciliation(ctx.queues, 'schedule');
  const skipped = 'reconciliation already running; tick skipped';
  ctx.logger.info(started, started.started ? 'scheduled reconciliation started' : skipped);
  return started;
}

/** Consumers whose sync ended, in a sync job of `reconciliation` (if any). */
export async function countSyncs(
  tallies: TallyStore,
  reconciliation: string | undefined,
  syncs: readonly { outcome: 'synced' | 'not_enrolled' }[],
): Promise<void> {
  if (reconciliation === undefined) return;
  const notEnrolled = syncs.filter((sync) => sync.outcome === 'not_enrolled').length;
  await updateTally(tallies, reconciliation, { synced: syncs.length - notEnrolled, notEnrolled });
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
  await updateTally(ctx.tallies, reconciliation, { failed }).catch((error: Error) =>
    ctx.logger.warn(
      { jobId: job.id, reconciliation, err: { message: error.message } },
      'could not count a failed sync in its reconciliation',
    ),
  );
}

/**
 * Makes the pending own sync job of each of `consumerIds` carry `reconciliation` (deduplicated
 * per consumer, it may be an older job, added without it). See the table for the others.
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
  await updateTally(tallies, reconciliation, { synced: unknowable });
}
