/**
 * Reconciliation: re-syncs every enrolled consumer. It reads consumer ids from Postgres in
 * keyset batches and fans them out as reward-sync jobs, waiting while the sync queue holds
 * more than `maxPending` jobs. So a million consumers never means a million jobs in Redis or
 * ids in memory: at most one batch in memory and about maxPending + batchSize jobs queued.
 *
 * The cursor (last consumer id enqueued) is saved in the job after every batch: a replica
 * killed mid-way hands the job to another (stalled-job recovery), which resumes there.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { type PerksJob, parsePayload, reconciliationPayloadSchema } from '../queues/payloads.js';
import { enqueueRewardSyncs, startReconciliation } from '../queues/producer.js';
import { setTallyFigure } from '../queues/reconciliation-tally.js';
import type { JobContext } from './context.js';
import { steerFailure } from './failures.js';

export interface ReconciliationResult {
  enqueued: number;
  batches: number;
  startedAt: string;
  finishedAt: string;
}

/** How often a reconciliation waiting for the sync queue to drain looks again. */
const backpressurePollMs = 250;

export async function processReconciliation(
  job: PerksJob<'reconcile'>,
  ctx: JobContext,
  signal?: AbortSignal,
): Promise<ReconciliationResult> {
  try {
    const state = parsePayload(reconciliationPayloadSchema, job.data, 'reconciliation');
    const startedAt = state.startedAt ?? new Date().toISOString();
    // Saved at once: `status` shows it started, with its real start, before the first batch.
    if (!state.startedAt) await job.updateData({ ...state, startedAt });
    const log = ctx.logger.child({
      queue: job.queueName,
      jobId: job.id,
      attempt: job.attemptsMade + 1,
    });
    const { batchSize, maxPending, consumersPerJob } = ctx.reconcile;
    // Names its tally, and prefixes the ids of the sync jobs it enqueues (see below).
    if (job.id === undefined) throw new Error('a reconciliation job without an id');
    const reconciliation = job.id;
    let { cursor, enqueued } = state;
    let batches = 0;
    if (cursor) log.info({ cursor, enqueued }, 'resuming reconciliation');
    else {
      const expected = await ctx.store.countReconcilableConsumers();
      await setTallyFigure(ctx.tallies, reconciliation, 'expected', expected);
    }

    for (;;) {
      signal?.throwIfAborted();
      await waitForRoom(ctx, maxPending, signal);
      const ids = await ctx.store.listEnrolledConsumerIds({ after: cursor, limit: batchSize });
      if (ids.length === 0) break;
      // Job ids from this reconciliation's: resumed after a crash between this line and the
      // cursor's save, it adds nothing for the consumers already enqueued.
      await enqueueRewardSyncs(ctx.queues, ids, 'reconciliation', {
        consumersPerJob,
        reconciliation,
      });
      cursor = ids[ids.length - 1] ?? cursor;
      enqueued += ids.length;
      batches += 1;
      await job.updateData({ ...state, cursor, enqueued, startedAt });
      await job.updateProgress({ enqueued, cursor });
      ctx.metrics.reconciliationProgress(enqueued);
      log.info(
        { batch: batches, size: ids.length, enqueued, cursor },
        'reconciliation batch enqueued',
      );
      if (ids.length < batchSize) break;
    }
    await setTallyFigure(ctx.tallies, reconciliation, 'total', enqueued);
    const finishedAt = new Date().toISOString();
    log.info({ enqueued, batches, startedAt, finishedAt }, 'reconciliation fanned out');
    ctx.metrics.reconciliationFinished();
    return { enqueued, batches, startedAt, finishedAt };
  } catch (error) {
    return steerFailure(error, ctx);
  }
}

/** Backpressure: the sync queue's backlog stays under maxPending. */
async function waitForRoom(
  ctx: JobContext,
  maxPending: number,
  signal?: AbortSignal,
): Promise<void> {
  for (;;) {
    const counts = await ctx.queues.rewardSync.getJobCounts('wait', 'prioritized', 'delayed');
    const pending = Object.values(counts).reduce((sum, n) => sum + n, 0);
    if (pending < maxPending) return;
    await sleep(backpressurePollMs, undefined, { signal });
  }
}

/** The cron scheduler's job: start a reconciliation unless one is already under way. */
export async function processReconcileTick(
  ctx: JobContext,
): Promise<{ started: boolean; jobId: string }> {
  const started = await startReconciliation(ctx.queues, 'schedule');
  ctx.logger.info(
    started,
    started.started
      ? 'scheduled reconciliation started'
      : 'reconciliation already running; tick skipped',
  );
  return started;
}
