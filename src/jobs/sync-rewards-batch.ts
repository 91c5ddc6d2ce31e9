/**
 * A sync job of several consumers (a reconciliation's fan-out) syncs them all at once, giving
 * each what a job of its own would: a consumer with a sync job of its own (pending or running)
 * is left to it; one that fails is handed to a job of its own, delayed as a first retry (so it
 * shows in `perks-worker failed` if it fails for good). Whatever pauses the queues or workers (a
 * 429, a failing mint, credentials refused, PostgreSQL away) stops the other syncs; the job goes
 * back to wait without spending an attempt, holding only the consumers not yet synced, as a
 * cancel (shutdown) leaves it for its retry.
 */
import { setMaxListeners } from 'node:events';
import { Backoffs, type Job, type Queue } from 'bullmq';
import type { WorkerConfig } from '../config.js';
import { ThrottledError, TokenMintError } from '../perks/errors.js';
import { maxConsumersPerSyncJob } from '../queues/names.js';
import {
  type PerksJob,
  parsePayload,
  type RewardSyncPayload,
  rewardSyncBatchPayloadSchema,
} from '../queues/payloads.js';
import { rewardSyncJob } from '../queues/producer.js';
import { carryReconciliation, countSyncs } from '../reconciliation/index.js';
import { linkSignals } from '../signals.js';
import type { JobContext } from './context.js';
import { BackToWait, pauseFor } from './failures.js';
import { addWrites, syncConsumer } from './sync-rewards.js';

export type RewardSyncBatchResult = Awaited<ReturnType<typeof processRewardSyncBatch>>;

interface Batch {
  job: PerksJob<'sync-rewards-batch'>;
  ctx: JobContext;
  /** What a consumer's own job takes from this one. */
  from: Pick<RewardSyncPayload, 'reason' | 'reconciliation'>;
  log: JobContext['logger'];
}

type Failed = { consumerId: string; error: unknown };

// Consumers per sync job of a reconciliation's fan-out. BullMQ's limiter counts jobs, so
// under PERKS_RATE_LIMIT_PER_SECOND each consumer keeps its own job and the cap counts syncs.
export const fanOutConsumersPerJob = (
  worker: Pick<WorkerConfig, 'syncConsumersPerJob' | 'rateLimitPerSecond'>,
) => (worker.rateLimitPerSecond === undefined ? worker.syncConsumersPerJob : 1);

/** Consumer syncs one replica runs at once at most, each writing a page at a time. */
export const syncsInFlight = (
  worker: Pick<WorkerConfig, 'syncConcurrency' | 'syncConsumersPerJob' | 'rateLimitPerSecond'>,
) => worker.syncConcurrency * fanOutConsumersPerJob(worker);

export async function processRewardSyncBatch(
  job: PerksJob<'sync-rewards-batch'>,
  ctx: JobContext,
  signal?: AbortSignal,
) {
  const payload = parsePayload(rewardSyncBatchPayloadSchema, job.data, 'reward sync batch');
  const { consumerIds, ...from } = payload;
  const attempt = job.attemptsMade + 1;
  const log = ctx.logger.child({ queue: job.queueName, jobId: job.id, attempt });
  const batch: Batch = { job, ctx, from, log };
  const leftToOwnJob = await leaveToOwnJobs(batch, consumerIds);
  const mine = consumerIds.filter((id) => !leftToOwnJob.includes(id));
  const run = await syncAtOnce(batch, mine, signal);
  const result = {
    consumers: consumerIds.length,
    synced: 0,
    notEnrolled: 0,
    /** Left to their own sync job, pending or running when this job started. */
    leftToOwnJob,
    /** Failed here; each is retried in a job of its own. */
    retriedAlone: [] as string[],
    pages: 0,
    written: { inserted: 0, updated: 0, unchanged: 0, statusChanges: 0 },
  };
  for (const synced of run.synced) {
    ctx.metrics.rewardSync(synced.outcome);
    result[synced.outcome === 'synced' ? 'synced' : 'notEnrolled'] += 1;
    result.pages += synced.pages;
    addWrites(result.written, synced.written);
    // The job's own line names its consumers and sums what they wrote; a line each would be a
    // line per record (millions a reconciliation). A failure or refusal is a warning anyway.
    log.debug(synced, 'consumer synced');
  }

  // Stopped (a 429, a failing mint, a cancel): what did not finish stays in this job.
  // Otherwise each consumer that failed goes to a job of its own.
  const failed = failedIds(run.failed);
  const staying = run.stopped ? [...failed] : [];
  let handOffError: unknown;
  if (!run.stopped && failed.length > 0) {
    try {
      await handOff(batch, run.failed);
      result.retriedAlone = failed;
    } catch (error) {
      handOffError = error;
      staying.push(...failed);
    }
  }
  // Counted now if the job ends, once narrowed if it stays (a narrow that fails keeps them all
  // in the job, whose next attempt syncs and counts them again).
  if (staying.length === 0 || (await narrow(batch, staying))) {
    await countSyncs(ctx.tallies, from.reconciliation, run.synced);
  }
  if (staying.length === 0) return result;
  if (signal?.aborted) throw signal.reason ?? run.failed[0]?.error;
  if (run.paused) throw new BackToWait(run.paused); // the queues are paused already
  throw handOffError;
}

// Those with a sync job of their own (a deduplication key), whose job is added again: ignored
// while it is pending, run after it while it runs, clearing a key whose job is gone.
async function leaveToOwnJobs(batch: Batch, consumerIds: readonly string[]): Promise<string[]> {
  const { queues, tallies } = batch.ctx;
  // Queue.getDeduplicationJobId's key, read in one MGET for all (not a round trip each) on the
  // worker's connection, which the tallies hold: BullMQ's own client type has no MGET.
  const keys = consumerIds.map((id) => `${queues.rewardSync.keys.de}:${id}`);
  const owners = await tallies.redis.mget(keys);
  const left = consumerIds.filter((_, i) => owners[i]);
  if (left.length > 0) {
    await addOwnJobs(batch, left);
    batch.log.info({ consumerIds: left }, 'consumers left to their own sync job');
  }
  return left;
}

/** Each consumer's own sync job, optionally delayed, counting it in the reconciliation. */
async function addOwnJobs({ ctx, from }: Batch, consumerIds: string[], delays: number[] = []) {
  const queue = ctx.queues.rewardSync;
  const jobs = consumerIds.map((consumerId, i) => {
    const own = rewardSyncJob({ consumerId, ...from });
    const delay = delays[i];
    return delay === undefined ? own : { ...own, opts: { ...own.opts, delay } };
  });
  await queue.addBulk(jobs);
  await carryReconciliation(queue, ctx.tallies, consumerIds, from.reconciliation);
}

// Every sync at once. Whatever pauses the queues or workers (pauseFor) stops the others too: a
// 429 or a failing mint at once, not once the slowest has ended; credentials refused or
// PostgreSQL away once a probe or ping confirms it. `stopped` after one of them, or a cancel.
async function syncAtOnce(
  { ctx, job }: Batch,
  consumerIds: readonly string[],
  signal: AbortSignal | undefined,
) {
  const stop = new AbortController();
  const linked = linkSignals([signal, stop.signal]);
  // Each sync listens to it (one API call at a time each): up to 100.
  setMaxListeners(maxConsumersPerSyncJob + 1, linked.signal);
  let paused: BackToWait['why'] | undefined;
  const settled = await Promise.allSettled(
    consumerIds.map(async (consumerId) => {
      try {
        return await syncConsumer(consumerId, ctx, job, linked.signal);
      } catch (error) {
        // A pause never shortens a longer one, and a mint's outage counts one failure a round.
        if (error instanceof ThrottledError || error instanceof TokenMintError) stop.abort();
        const why = await pauseFor(error, ctx);
        if (why) stop.abort();
        paused = why ?? paused;
        throw error;
      }
    }),
  ).finally(linked.dispose);

  const synced = settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  const failed: Failed[] = settled.flatMap((s, i) =>
    s.status === 'rejected' ? [{ consumerId: consumerIds[i] ?? '', error: s.reason }] : [],
  );
  return { synced, failed, stopped: linked.signal.aborted, ...(paused ? { paused } : {}) };
}

/** Each failed consumer to a job of its own, delayed as its first retry would be. */
async function handOff(batch: Batch, failed: readonly Failed[]): Promise<void> {
  const { ctx, job, log } = batch;
  const queue = ctx.queues.rewardSync;
  const delays = await Promise.all(failed.map(({ error }) => firstRetryDelayMs(queue, job, error)));
  await addOwnJobs(batch, failedIds(failed), delays);
  failed.forEach(({ consumerId, error }, i) => {
    ctx.metrics.rewardSync('retried_alone');
    const fields = { consumerId, err: describe(error), delayMs: delays[i] };
    log.warn(fields, 'consumer sync failed; retried in a job of its own');
  });
}

/** Leaves in the job only `consumerIds`, for its next attempt; false if that failed. */
async function narrow({ job, from, log }: Batch, consumerIds: string[]): Promise<boolean> {
  try {
    await job.updateData({ consumerIds, ...from });
    return true;
  } catch (error) {
    // Not fatal: the job keeps all its consumers, and its next attempt syncs them all.
    log.warn({ err: describe(error) }, 'could not narrow the job to the consumers left');
    return false;
  }
}

/** The delay of a first retry under the queue's backoff policy, as BullMQ computes it. */
async function firstRetryDelayMs(queue: Queue, job: Job, error: unknown): Promise<number> {
  const { backoff } = queue.defaultJobOptions;
  const policy = backoff === undefined ? undefined : Backoffs.normalize(backoff);
  if (!policy) return 0;
  const cause = error instanceof Error ? error : new Error(String(error));
  return (await Backoffs.calculate(policy, 1, cause, job)) ?? 0;
}

const failedIds = (failed: readonly Failed[]) => failed.map((f) => f.consumerId);

const describe = (error: unknown) =>
  error instanceof Error
    ? { name: error.name, message: error.message }
    : { message: String(error) };
