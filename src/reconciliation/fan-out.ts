/**
 * A reconciliation's fan-out: consumer ids read in keyset batches and enqueued as sync jobs that
 * carry its id while the sync queue holds fewer than `maxPending` (one batch in memory, about
 * maxPending + batchSize jobs in Redis, whatever the number of consumers). The cursor is saved
 * in the job after every batch: a killed replica's job is resumed there by another.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod';
import type { JobContext } from '../jobs/context.js';
import { tryJson } from '../perks/errors.js';
import { consumerIdSchema } from '../perks/schemas.js';
import { maxConsumersPerSyncJob, queueNames } from '../queues/names.js';
import { type PerksJob, parsePayload, reconciliationPayloadSchema } from '../queues/payloads.js';
import { enqueueRewardSyncs } from '../queues/producer.js';
import { recordLastReconciliation, updateTally } from './tally.js';

const backpressurePollMs = 250;

/**
 * The batch an attempt enqueues, saved before its enqueue and dropped once the cursor after it
 * is: a resume enqueues it again as it was chunked. Read anew, a consumer enrolled or dropped
 * meanwhile would shift the chunks, whose ids are their first consumer's, and put some in two
 * jobs. Beside the job, not in its data: an older build's strict check of the payload would fail
 * the reconciliation for good on a field it does not know. A day: a resume comes within minutes.
 */
const inFlightSchema = z.strictObject({
  after: consumerIdSchema.nullable(),
  ids: z.array(consumerIdSchema).min(1).max(10_000),
  perJob: z.number().int().min(1).max(maxConsumersPerSyncJob),
});
const inFlightTtlSeconds = 24 * 3600;
const inFlightKey = (ctx: JobContext, reconciliation: string) =>
  `${ctx.tallies.prefix}:${queueNames.reconciliation}:in-flight:${reconciliation}`;

export async function processReconciliation(
  job: PerksJob<'reconcile'>,
  ctx: JobContext,
  signal?: AbortSignal,
) {
  // The gauge is of the reconciliation running here: none once this attempt has ended.
  return fanOut(job, ctx, signal).catch((error: unknown) => {
    ctx.metrics.reconciliationProgress(0);
    throw error;
  });
}

async function fanOut(job: PerksJob<'reconcile'>, ctx: JobContext, signal?: AbortSignal) {
  const state = parsePayload(reconciliationPayloadSchema, job.data, 'reconciliation');
  // Names its tally, and prefixes the ids of the sync jobs it enqueues.
  const reconciliation = job.id;
  if (reconciliation === undefined) throw new Error('a reconciliation job without an id');
  const startedAt = state.startedAt ?? new Date().toISOString();
  // Saved at once: `status` shows it started, with its real start, before the first batch.
  if (!state.startedAt) await job.updateData({ ...state, startedAt });
  // Until it started it waits in `wait`, where `status` finds it; after, by this.
  await recordLastReconciliation(ctx.tallies, reconciliation);
  const attempt = job.attemptsMade + 1;
  const log = ctx.logger.child({ queue: job.queueName, jobId: reconciliation, attempt });
  const { batchSize, maxPending, consumersPerJob } = ctx.reconcile;
  let { cursor, enqueued } = state;
  const key = inFlightKey(ctx, reconciliation);
  const saved = inFlightSchema.safeParse(tryJson((await ctx.tallies.redis.get(key)) ?? '')).data;
  // Saved with the cursor it started from: a crash between the cursor's save and the key's
  // removal left one the cursor has passed.
  let inFlight = saved?.after === cursor ? saved : undefined;
  let batches = 0;
  if (cursor) log.info({ cursor, enqueued }, 'resuming reconciliation');
  else {
    const expected = await ctx.store.countReconcilableConsumers();
    await updateTally(ctx.tallies, reconciliation, {}, ['expected', expected]);
  }

  for (;;) {
    await waitForRoom(ctx, maxPending, signal);
    const batch = inFlight ?? {
      after: cursor,
      ids: await ctx.store.listEnrolledConsumerIds({ after: cursor, limit: batchSize }),
      perJob: consumersPerJob,
    };
    const replayed = inFlight !== undefined;
    inFlight = undefined;
    const { ids } = batch;
    if (ids.length === 0) break;
    await ctx.tallies.redis.set(key, JSON.stringify(batch), 'EX', inFlightTtlSeconds);
    // The sync jobs' ids derive from the reconciliation's: resumed after a crash between this
    // line and the cursor's save, it adds nothing for the consumers already enqueued.
    const options = { consumersPerJob: batch.perJob, reconciliation };
    await enqueueRewardSyncs(ctx.queues, ids, 'reconciliation', options);
    cursor = ids[ids.length - 1] ?? cursor;
    enqueued += ids.length;
    batches += 1;
    await job.updateData({ ...state, cursor, enqueued, startedAt });
    await ctx.tallies.redis.del(key);
    await job.updateProgress({ enqueued, cursor });
    ctx.metrics.reconciliationProgress(enqueued);
    const fields = { batch: batches, size: ids.length, enqueued, cursor };
    log.info(fields, 'reconciliation batch enqueued');
    if (ids.length < batchSize && !replayed) break;
  }
  await updateTally(ctx.tallies, reconciliation, {}, ['total', enqueued]);
  const finishedAt = new Date().toISOString();
  log.info({ enqueued, batches, startedAt, finishedAt }, 'reconciliation fanned out');
  ctx.metrics.reconciliationFinished();
  return { enqueued, batches, startedAt, finishedAt };
}

/** Backpressure: the sync queue's backlog stays under maxPending. */
async function waitForRoom(ctx: JobContext, maxPending: number, signal?: AbortSignal) {
  for (;;) {
    signal?.throwIfAborted();
    const counts = await ctx.queues.rewardSync.getJobCounts('wait', 'prioritized', 'delayed');
    if (Object.values(counts).reduce((sum, n) => sum + n, 0) < maxPending) return;
    await sleep(backpressurePollMs, undefined, { signal });
  }
}
