/**
 * Reward sync: walks a consumer's rewards, writing each page as it arrives (memory holds one
 * page and the ids seen). 500/502 are retried by the client, then BullMQ (a page written twice
 * is harmless). ERR-404-02 (not enrolled) is recorded: an outcome, not a failure. If `total`
 * moved during the walk, rows may have shifted between pages: it scans once more. Only a
 * complete, consistent scan may mark rewards missing, and not one that refused an item (kept in
 * rejected_rewards, the rest of its page written): the item may be a stored reward. After a
 * walk of several pages each one to mark is first asked for by id (stillThere); more than 50,
 * and the consumer is walked again.
 */
import type { Job } from 'bullmq';
import type { Logger } from '../ops/logger.js';
import type { RewardPage } from '../perks/client.js';
import { ConsumerNotEnrolledError, NotFoundError, ResponseShapeError } from '../perks/errors.js';
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
  /** Items the reward schema refused, over the scans. */
  rejected: number;
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
  // Made when first used: pino builds a child's redacted bindings at once (11 to 18 µs), and
  // most syncs log nothing of their own.
  let child: Logger | undefined;
  const log = () =>
    (child ??= ctx.logger.child({ queue: job.queueName, jobId: job.id, consumerId, attempt }));
  const result: RewardSyncResult = {
    consumerId,
    outcome: 'synced',
    pages: 0,
    total: 0,
    written: { inserted: 0, updated: 0, unchanged: 0, statusChanges: 0 },
    scans: 0,
    consistent: false,
    markedMissing: 0,
    rejected: 0,
  };
  // Before any request: a refusal is news from no later than this.
  const firstRequestAt = new Date();
  try {
    while (result.scans < maxScans && !result.consistent) {
      result.scans += 1;
      result.consistent = await scanOnce(ctx, job, log, signal, result);
      if (!result.consistent && result.scans < maxScans)
        log().warn(
          { scan: result.scans },
          'the walk may have skipped rewards (its total moved, or too many unseen to confirm); rescanning',
        );
    }
  } catch (error) {
    if (!(error instanceof ConsumerNotEnrolledError)) throw error;
    await ctx.store.markNotEnrolled({ consumerId, at: firstRequestAt });
    log().warn({ code: error.code }, 'consumer not enrolled upstream; marked, not retried');
    return { ...result, outcome: 'not_enrolled' };
  }
  return result;
}

// One walk over the pages; true if consistent. The last page's write also ends the sync
// (missing rewards, last_synced_at), unless the walk was inconsistent and a rescan is left.
async function scanOnce(
  ctx: JobContext,
  job: Job,
  log: () => Logger,
  signal: AbortSignal | undefined,
  result: RewardSyncResult,
): Promise<boolean> {
  const { consumerId } = result;
  const startedAt = new Date();
  const seenIds: string[] = [];
  let rejected = 0;
  let consistent = true;
  const options = { perPage: 1000, sort: '-executed_at', signal } as const;
  for await (const page of ctx.client.listRewardPages(consumerId, options)) {
    for (const id of page.ids) seenIds.push(id);
    rejected += page.rejected.length;
    // Fewer distinct items than announced at the end: the list shifted during the walk.
    if (page.totalChanged || (page.lastPage && new Set(seenIds).size + rejected !== page.total)) {
      consistent = false;
    }
    // Stamped when its answered request went out: a slow answer must not pass for newer.
    const at = page.requestedAt;
    if (page.rejected.length > 0) await recordRejected(ctx, log, consumerId, page);
    // A walk of several pages may skip rewards with the total unchanged (some gone from a page
    // read, as many come after it): each it would mark missing is asked for by id first. Too
    // many to ask: a second walk tells such a shift from a deletion, and is trusted.
    if (page.lastPage && consistent && rejected === 0 && page.page > 1) {
      const present = await stillThere(ctx, consumerId, seenIds, startedAt, signal);
      if (present === undefined && result.scans < maxScans) consistent = false;
      else seenIds.push(...(present ?? []));
    }
    const ends = page.lastPage && (consistent || result.scans >= maxScans);
    const missing = consistent
      ? { seenIds, scanStartedAt: startedAt, rejected: rejected > 0 }
      : null;
    const started = performance.now();
    const rewards =
      page.json === undefined ? { rewards: page.items } : { json: page.json, ids: page.ids };
    const { markedMissing, ...written } = await ctx.store.writeRewardPage({
      ...rewards,
      consumerId,
      observedAt: at,
      ...(ends ? { finish: { missing, at } } : {}),
    });
    ctx.metrics.rewardPageWritten(written);
    result.pages += 1;
    result.total = page.total;
    addWrites(result.written, written);
    result.markedMissing += markedMissing;
    result.rejected += page.rejected.length;
    const pages = Math.max(1, Math.ceil(page.total / page.perPage));
    // Progress and a line per page are for long walks: a one-page sync would pay a Redis round
    // trip and a log write for them, and its job's or consumer's line says what it wrote.
    if (pages === 1) continue;
    await job.updateProgress({ consumerId, page: page.page, pages, total: page.total });
    const { ids, rejected: refused, total } = page;
    const fields = { page: page.page, pages, items: ids.length, rejected: refused.length, total };
    const end = ends ? { markedMissing, finished: true } : {};
    const writeMs = Math.round(performance.now() - started);
    log().info({ ...fields, ...written, ...end, writeMs }, 'reward page written');
  }
  return consistent;
}

/** Most rewards asked for by id at the end of a walk. */
const maxConfirmations = 50;

/**
 * The stored rewards the walk did not see that the API still answers for (a 404: gone);
 * undefined when there are more than `maxConfirmations` of them.
 */
async function stillThere(
  ctx: JobContext,
  consumerId: string,
  seenIds: readonly string[],
  scanStartedAt: Date,
  signal: AbortSignal | undefined,
): Promise<string[] | undefined> {
  const unseen = await ctx.store.unseenRewards(
    consumerId,
    seenIds,
    scanStartedAt,
    maxConfirmations + 1,
  );
  if (unseen.length > maxConfirmations) return undefined;
  const present: string[] = [];
  for (const rewardId of unseen) {
    try {
      await ctx.client.getReward(consumerId, rewardId, signal ? { signal } : {});
      present.push(rewardId);
    } catch (error) {
      // There, though in a shape refused: still not missing.
      if (error instanceof ResponseShapeError) present.push(rewardId);
      else if (!(error instanceof NotFoundError)) throw error;
    }
  }
  return present;
}

// Logged without the item's text, which may be huge: rejected_rewards.raw holds it.
async function recordRejected(
  ctx: JobContext,
  log: () => Logger,
  consumerId: string,
  page: RewardPage,
): Promise<void> {
  await ctx.store.recordRejectedRewards(consumerId, page.rejected, page.requestedAt);
  ctx.metrics.rewardsRejected(page.rejected.length);
  for (const { rewardId, error } of page.rejected) {
    log().warn(
      { page: page.page, rewardId, error },
      'reward item refused; kept in rejected_rewards',
    );
  }
}
