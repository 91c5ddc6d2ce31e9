/**
 * Reward sync: walks a consumer's rewards, writing each page as it arrives (memory holds one
 * page and the ids seen). 500/502 are retried by the client, then BullMQ (a page written twice
 * is harmless). ERR-404-02 (not enrolled) is recorded: an outcome, not a failure. If `total`
 * moved during the walk, rows may have shifted between pages: it scans once more. Only a
 * complete, consistent scan may mark rewards missing.
 */
import type { Job } from 'bullmq';
import { ConsumerNotEnrolledError } from '../perks/errors.js';
import { type PerksJob, parsePayload, rewardSyncPayloadSchema } from '../queues/payloads.js';
import { countSyncs } from '../reconciliation/index.js';
import type { RewardPageWrite } from '../store/store.js';
import type { JobContext } from './context.js';

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
  job: PerksJob<'sync-rewards'>,
  ctx: JobContext,
  signal?: AbortSignal,
): Promise<RewardSyncResult> {
  const payload = parsePayload(rewardSyncPayloadSchema, job.data, 'reward sync');
  const result = await syncConsumer(payload.consumerId, ctx, job, signal);
  ctx.metrics.rewardSync(result.outcome);
  await countSyncs(ctx.tallies, payload.reconciliation, [result]);
  return result;
}

/** Adds one sync's or page's writes to a total. */
export function addWrites(total: RewardPageWrite, more: RewardPageWrite): void {
  for (const key of Object.keys(total) as (keyof RewardPageWrite)[]) total[key] += more[key];
}

/** One consumer's sync, in a job of its own or of several. Failures other than ERR-404-02 throw. */
export async function syncConsumer(
  consumerId: string,
  ctx: JobContext,
  job: Job,
  signal: AbortSignal | undefined,
): Promise<RewardSyncResult> {
  const attempt = job.attemptsMade + 1;
  const log = ctx.logger.child({ queue: job.queueName, jobId: job.id, consumerId, attempt });
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
  // Before any request: a refusal is news from no later than this.
  const firstRequestAt = new Date();
  try {
    while (result.scans < maxScans && !result.consistent) {
      result.scans += 1;
      result.consistent = await scanOnce(ctx, job, log, signal, result);
      if (!result.consistent)
        log.warn({ scan: result.scans }, 'total moved during the walk; rescanning');
    }
  } catch (error) {
    if (!(error instanceof ConsumerNotEnrolledError)) throw error;
    await ctx.store.markNotEnrolled({ consumerId, at: firstRequestAt });
    log.warn({ code: error.code }, 'consumer not enrolled upstream; marked, not retried');
    return { ...result, outcome: 'not_enrolled' };
  }
  return result;
}

// One walk over the pages; true if consistent. The last page's write also ends the sync
// (missing rewards, last_synced_at), unless the walk was inconsistent and a rescan is left.
async function scanOnce(
  ctx: JobContext,
  job: Job,
  log: JobContext['logger'],
  signal: AbortSignal | undefined,
  result: RewardSyncResult,
): Promise<boolean> {
  const { consumerId } = result;
  const startedAt = new Date();
  const seenIds: string[] = [];
  let consistent = true;
  const options = { perPage: 1000, sort: '-executed_at', signal } as const;
  for await (const page of ctx.client.listRewardPages(consumerId, options)) {
    for (const reward of page.items) seenIds.push(reward.id);
    // Fewer distinct rewards than announced at the end: the list shifted during the walk.
    if (page.totalChanged || (page.lastPage && new Set(seenIds).size !== page.total)) {
      consistent = false;
    }
    // Stamped before the request: a slow answer must not overwrite a newer observation.
    const at = page.requestedAt;
    const missing = consistent ? { seenIds, scanStartedAt: startedAt } : null;
    const ends = page.lastPage && (consistent || result.scans >= maxScans);
    const started = performance.now();
    const { markedMissing, ...written } = await ctx.store.writeRewardPage({
      consumerId,
      rewards: page.items,
      json: page.json,
      observedAt: at,
      ...(ends ? { finish: { missing, at } } : {}),
    });
    ctx.metrics.rewardPageWritten(written);
    result.pages += 1;
    result.total = page.total;
    addWrites(result.written, written);
    result.markedMissing += markedMissing;
    const pages = Math.max(1, Math.ceil(page.total / page.perPage));
    // Progress is for long walks; a one-page sync would only pay a Redis round trip for it.
    if (pages > 1)
      await job.updateProgress({ consumerId, page: page.page, pages, total: page.total });
    const fields = { page: page.page, pages, items: page.items.length, total: page.total };
    const end = ends ? { markedMissing, finished: true } : {};
    const writeMs = Math.round(performance.now() - started);
    log.info({ ...fields, ...written, ...end, writeMs }, 'reward page written');
  }
  return consistent;
}
