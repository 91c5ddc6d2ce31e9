/**
 * Reward sync: walks a consumer's rewards (per_page=1000, sort=-executed_at) and writes each
 * page as it arrives, so memory holds one page (plus the ids seen, for missing detection).
 *
 * - 500/502 are retried with backoff inside the client; past that the job fails and BullMQ
 *   retries it later. Re-writing pages already written is harmless: writes are idempotent.
 * - ERR-404-02: the consumer is not enrolled; recorded, and the job ends without retries.
 * - If `total` moved during the walk, rows may have shifted between pages: scan once more.
 *   Only a complete, consistent scan may mark rewards missing.
 *
 * A job of several consumers (a reconciliation's fan-out, `enqueueRewardSyncs`) syncs them
 * all at once, each exactly as a job of its own would, and gives each what its own job would:
 * - a consumer whose own sync job is pending or running is left to it (as deduplication would);
 * - a consumer that fails is handed to a job of its own, delayed as a first retry, with the
 *   usual attempts, and shows in `perks-worker failed` if it fails for good;
 * - a 429 or a shutdown ends the job with only the consumers not yet synced left in it: a
 *   throttled job waits without spending an attempt, a cancelled one is retried.
 */
import { setMaxListeners } from 'node:events';
import { type Job, type Queue, RateLimitError } from 'bullmq';
import { ConsumerNotEnrolledError, ThrottledError } from '../perks/errors.js';
import { linkSignals } from '../perks/signals.js';
import {
  maxConsumersPerSyncJob,
  parsePayload,
  rewardSyncBatchPayloadSchema,
  rewardSyncPayloadSchema,
} from '../queues/payloads.js';
import { rewardSyncJob } from '../queues/producer.js';
import type { RewardPageWrite } from '../store/store.js';
import type { JobContext } from './context.js';
import { pauseForThrottle, steerFailure } from './failures.js';

export interface RewardSyncResult {
  consumerId: string;
  outcome: 'synced' | 'not_enrolled';
  pages: number;
  total: number;
  written: RewardPageWrite;
  /** Scans made: 2 when the total moved during the first. */
  scans: number;
  /** False when the total still moved during the last scan: nothing was marked missing. */
  consistent: boolean;
  markedMissing: number;
}

export interface RewardSyncBatchResult {
  consumers: number;
  synced: number;
  notEnrolled: number;
  /** Left to their own sync job, pending or running when this job started. */
  leftToOwnJob: string[];
  /** Failed here; each is retried in a job of its own. */
  retriedAlone: string[];
  pages: number;
  written: RewardPageWrite;
}

const maxScans = 2;

export async function processRewardSync(
  job: Job,
  ctx: JobContext,
  signal?: AbortSignal,
): Promise<RewardSyncResult> {
  try {
    const { consumerId } = parsePayload(rewardSyncPayloadSchema, job.data, 'reward sync');
    const result = await syncConsumer(consumerId, ctx, job, signal);
    ctx.metrics.rewardSync(result.outcome);
    return result;
  } catch (error) {
    return steerFailure(error, ctx.queues);
  }
}

export async function processRewardSyncBatch(
  job: Job,
  ctx: JobContext,
  signal?: AbortSignal,
): Promise<RewardSyncBatchResult> {
  try {
    const { consumerIds, reason } = parsePayload(
      rewardSyncBatchPayloadSchema,
      job.data,
      'reward sync batch',
    );
    const queue = ctx.queues.rewardSync;
    const log = ctx.logger.child({
      queue: job.queueName,
      jobId: job.id,
      attempt: job.attemptsMade + 1,
    });
    const ownJob = (consumerId: string, delay?: number) => {
      const single = rewardSyncJob({ consumerId, ...(reason ? { reason } : {}) });
      return delay === undefined ? single : { ...single, opts: { ...single.opts, delay } };
    };

    // A consumer with a sync job of its own is left to it. Adding that job again is what
    // deduplication answers, as for a job of one consumer: ignored while it is pending, run
    // after it while it runs; and a key whose job no longer exists is cleared.
    const leftToOwnJob = await withOwnJob(queue, consumerIds);
    if (leftToOwnJob.length > 0) {
      await queue.addBulk(leftToOwnJob.map((consumerId) => ownJob(consumerId)));
      log.info({ consumerIds: leftToOwnJob }, 'consumers left to their own sync job');
    }
    const mine = consumerIds.filter((id) => !leftToOwnJob.includes(id));

    // A 429 stops the job's other syncs at once and pauses the queues now, not once the
    // slowest of them has ended.
    const stop = new AbortController();
    const linked = linkSignals([signal, stop.signal]);
    const stopping = linked.signal;
    // Each of the job's syncs listens to it (one API call at a time each): up to 100.
    setMaxListeners(maxConsumersPerSyncJob + 1, stopping);
    let throttled: ThrottledError | undefined;
    const settled = await Promise.allSettled(
      mine.map(async (consumerId) => {
        try {
          return await syncConsumer(consumerId, ctx, job, stopping);
        } catch (error) {
          if (
            error instanceof ThrottledError &&
            error.retryAfterMs >= (throttled?.retryAfterMs ?? 0)
          ) {
            throttled = error;
            stop.abort('throttled by the API');
            await pauseForThrottle(error, ctx.queues);
          }
          throw error;
        }
      }),
    ).finally(linked.dispose);

    const result: RewardSyncBatchResult = {
      consumers: consumerIds.length,
      synced: 0,
      notEnrolled: 0,
      leftToOwnJob,
      retriedAlone: [],
      pages: 0,
      written: { inserted: 0, updated: 0, unchanged: 0, statusChanges: 0 },
    };
    const failed: { consumerId: string; error: unknown }[] = [];
    settled.forEach((outcome, i) => {
      const consumerId = mine[i] ?? '';
      if (outcome.status === 'rejected') {
        failed.push({ consumerId, error: outcome.reason });
        return;
      }
      const synced = outcome.value;
      ctx.metrics.rewardSync(synced.outcome);
      if (synced.outcome === 'synced') result.synced += 1;
      else result.notEnrolled += 1;
      result.pages += synced.pages;
      addWrites(result.written, synced.written);
      log.info(synced, 'consumer synced');
    });

    // Stopped (a 429, a cancel): what did not finish stays in this job. Otherwise each
    // consumer that failed goes to a job of its own, delayed as a first retry.
    const staying = stopping.aborted ? failed.map((f) => f.consumerId) : [];
    let handOff: unknown;
    if (!stopping.aborted && failed.length > 0) {
      try {
        const delays = failed.map(() => firstRetryDelayMs(queue));
        await queue.addBulk(failed.map(({ consumerId }, i) => ownJob(consumerId, delays[i])));
        failed.forEach(({ consumerId, error }, i) => {
          ctx.metrics.rewardSync('retried_alone');
          result.retriedAlone.push(consumerId);
          log.warn(
            { consumerId, err: describe(error), delayMs: delays[i] },
            'consumer sync failed; retried in a job of its own',
          );
        });
      } catch (error) {
        handOff = error;
        staying.push(...failed.map((f) => f.consumerId));
      }
    }
    if (staying.length > 0) {
      try {
        await job.updateData({ consumerIds: staying, reason });
      } catch (error) {
        // Not fatal: the job keeps all its consumers, and its next attempt syncs them all.
        log.warn({ err: describe(error) }, 'could not narrow the job to the consumers left');
      }
      if (signal?.aborted) throw signal.reason ?? failed[0]?.error;
      if (throttled) throw new RateLimitError(); // the queues are paused already
      throw handOff;
    }
    return result;
  } catch (error) {
    return steerFailure(error, ctx.queues);
  }
}

/** Those of `consumerIds` with a sync job of their own: its deduplication key is set. */
async function withOwnJob(queue: Queue, consumerIds: readonly string[]): Promise<string[]> {
  const owners = await Promise.all(consumerIds.map((id) => queue.getDeduplicationJobId(id)));
  return consumerIds.filter((_, i) => owners[i]);
}

/** The delay of a job's first retry under the queue's backoff policy, jitter included. */
function firstRetryDelayMs(queue: Queue): number {
  const { backoff } = queue.defaultJobOptions;
  if (typeof backoff === 'number') return backoff;
  const delay = backoff?.delay ?? 0;
  return Math.round(delay * (1 - (backoff?.jitter ?? 0) * Math.random()));
}

function addWrites(total: RewardPageWrite, more: RewardPageWrite): void {
  total.inserted += more.inserted;
  total.updated += more.updated;
  total.unchanged += more.unchanged;
  total.statusChanges += more.statusChanges;
}

const describe = (error: unknown) =>
  error instanceof Error
    ? { name: error.name, message: error.message }
    : { message: String(error) };

/**
 * One consumer's sync, for a job of its own or one of several. Not enrolled upstream
 * (ERR-404-02) is recorded and is an outcome; any other failure is thrown, unsteered.
 */
async function syncConsumer(
  consumerId: string,
  ctx: JobContext,
  job: Job,
  signal: AbortSignal | undefined,
): Promise<RewardSyncResult> {
  const log = ctx.logger.child({
    queue: job.queueName,
    jobId: job.id,
    consumerId,
    attempt: job.attemptsMade + 1,
  });
  const result: RewardSyncResult = {
    consumerId,
    outcome: 'synced',
    pages: 0,
    total: 0,
    written: { inserted: 0, updated: 0, unchanged: 0, statusChanges: 0 },
    scans: 0,
    consistent: false,
    markedMissing: 0,
  };
  try {
    while (result.scans < maxScans && !result.consistent) {
      result.scans += 1;
      result.consistent = await scanOnce(consumerId, ctx, job, log, signal, result);
      if (!result.consistent) {
        log.warn({ scan: result.scans }, 'total moved during the walk; rescanning');
      }
    }
  } catch (error) {
    if (!(error instanceof ConsumerNotEnrolledError)) throw error;
    await ctx.store.markNotEnrolled({ consumerId, at: new Date() });
    log.warn({ code: error.code }, 'consumer not enrolled upstream; marked, not retried');
    return { ...result, outcome: 'not_enrolled' };
  }
  return result;
}

/**
 * One walk over the consumer's pages, each written as it arrives. The last page's statement
 * also ends the sync (missing rewards, last_synced_at) when this walk is consistent or no
 * rescan is left; otherwise it is written alone and the caller scans again. Returns whether
 * the walk was consistent.
 */
async function scanOnce(
  consumerId: string,
  ctx: JobContext,
  job: Job,
  log: JobContext['logger'],
  signal: AbortSignal | undefined,
  result: RewardSyncResult,
): Promise<boolean> {
  const startedAt = new Date();
  const seenIds: string[] = [];
  let consistent = true;
  const pages = ctx.client.listRewardPages(consumerId, {
    perPage: 1000,
    sort: '-executed_at',
    signal,
  });
  for await (const page of pages) {
    for (const reward of page.items) seenIds.push(reward.id);
    if (page.totalChanged) consistent = false;
    // A walk that ended with fewer distinct rewards than announced saw a shifting list.
    if (page.lastPage && new Set(seenIds).size !== page.total) consistent = false;
    const observedAt = new Date();
    const finish =
      !page.lastPage || (!consistent && result.scans < maxScans)
        ? undefined
        : {
            missing: consistent ? { seenIds, scanStartedAt: startedAt } : null,
            at: observedAt,
          };
    const started = performance.now();
    const { markedMissing, ...written } = await ctx.store.writeRewardPage({
      consumerId,
      rewards: page.items,
      json: page.json,
      observedAt,
      ...(finish ? { finish } : {}),
    });
    ctx.metrics.rewardPageWritten(written);

    result.pages += 1;
    result.total = page.total;
    addWrites(result.written, written);
    result.markedMissing += markedMissing;
    const pageCount = Math.max(1, Math.ceil(page.total / page.perPage));
    // Progress is for long walks; a one-page sync would only pay a Redis round trip for it.
    if (pageCount > 1) {
      await job.updateProgress({
        consumerId,
        page: page.page,
        pages: pageCount,
        total: page.total,
      });
    }
    log.info(
      {
        page: page.page,
        pages: pageCount,
        items: page.items.length,
        total: page.total,
        ...written,
        ...(finish ? { markedMissing, finished: true } : {}),
        writeMs: Math.round(performance.now() - started),
      },
      'reward page written',
    );
  }
  return consistent;
}
