/**
 * Reward sync: walks a consumer's rewards (per_page=1000, sort=-executed_at) and writes each
 * page as it arrives, so memory holds one page (plus the ids seen, for missing detection).
 *
 * - 500/502 are retried with backoff inside the client; past that the job fails and BullMQ
 *   retries it later. Re-writing pages already written is harmless: writes are idempotent.
 * - ERR-404-02: the consumer is not enrolled; recorded, and the job ends without retries.
 * - If `total` moved during the walk, rows may have shifted between pages: scan once more.
 *   Only a complete, consistent scan may mark rewards missing.
 */
import type { Job } from 'bullmq';
import { ConsumerNotEnrolledError } from '../perks/errors.js';
import { parsePayload, rewardSyncPayloadSchema } from '../queues/payloads.js';
import type { RewardPageWrite } from '../store/store.js';
import type { JobContext } from './context.js';
import { steerFailure } from './failures.js';

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

const maxScans = 2;

export async function processRewardSync(
  job: Job,
  ctx: JobContext,
  signal?: AbortSignal,
): Promise<RewardSyncResult> {
  try {
    const { consumerId } = parsePayload(rewardSyncPayloadSchema, job.data, 'reward sync');
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

    let lastScan: Scan | undefined;
    try {
      while (result.scans < maxScans && !result.consistent) {
        result.scans += 1;
        lastScan = await scanOnce(consumerId, ctx, job, log, signal, result);
        result.consistent = lastScan.consistent;
        if (!lastScan.consistent) {
          log.warn({ scan: result.scans }, 'total moved during the walk; rescanning');
        }
      }
    } catch (error) {
      if (!(error instanceof ConsumerNotEnrolledError)) throw error;
      await ctx.store.markNotEnrolled({ consumerId, at: new Date() });
      log.warn({ code: error.code }, 'consumer not enrolled upstream; marked, not retried');
      return { ...result, outcome: 'not_enrolled' };
    }
    // Missing rewards (only after a complete, consistent scan) and last_synced_at, in one
    // round trip.
    const { markedMissing } = await ctx.store.finishSync({
      consumerId,
      missing:
        result.consistent && lastScan
          ? { seenIds: lastScan.seenIds, scanStartedAt: lastScan.startedAt }
          : null,
      at: new Date(),
    });
    result.markedMissing = markedMissing;
    return result;
  } catch (error) {
    return steerFailure(error, ctx.queues);
  }
}

interface Scan {
  startedAt: Date;
  seenIds: string[];
  consistent: boolean;
}

async function scanOnce(
  consumerId: string,
  ctx: JobContext,
  job: Job,
  log: JobContext['logger'],
  signal: AbortSignal | undefined,
  result: RewardSyncResult,
): Promise<Scan> {
  const startedAt = new Date();
  const seenIds: string[] = [];
  let consistent = true;
  const pages = ctx.client.listRewardPages(consumerId, {
    perPage: 1000,
    sort: '-executed_at',
    signal,
  });
  for await (const page of pages) {
    const observedAt = new Date();
    const started = performance.now();
    const written = await ctx.store.writeRewardPage({
      consumerId,
      rewards: page.items,
      observedAt,
    });
    ctx.metrics.rewardPageWritten(written);
    for (const reward of page.items) seenIds.push(reward.id);
    if (page.totalChanged) consistent = false;

    result.pages += 1;
    result.total = page.total;
    result.written.inserted += written.inserted;
    result.written.updated += written.updated;
    result.written.unchanged += written.unchanged;
    result.written.statusChanges += written.statusChanges;
    const pageCount = Math.max(1, Math.ceil(page.total / page.perPage));
    // Progress is for long walks; a one-page sync would only pay a Redis round trip for it.
    if (pageCount > 1) {
      await job.updateProgress({ page: page.page, pages: pageCount, total: page.total });
    }
    log.info(
      {
        page: page.page,
        pages: pageCount,
        items: page.items.length,
        total: page.total,
        ...written,
        writeMs: Math.round(performance.now() - started),
      },
      'reward page written',
    );
  }
  // A walk that ended with fewer distinct rewards than announced saw a shifting list.
  if (new Set(seenIds).size !== result.total) consistent = false;
  return { startedAt, seenIds, consistent };
}
