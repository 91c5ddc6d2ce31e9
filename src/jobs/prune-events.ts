/**
 * The feed's retention: deletes the reward events older than EVENT_RETENTION_DAYS, with their
 * failures, in batches by id (prune_reward_events.sql). Ids grow with time, so a run stops
 * after a stretch of recent events; one written out of order beyond it (by hand) is reached
 * once the events before it expire. Run hourly and at start, once for all replicas (schedule.ts).
 */

import { pruneRewardEventBatch } from '../store/event-deliveries.js';
import { quoteIdentifier } from '../store/identifier.js';
import type { JobContext } from './context.js';

/** Events read, and at most deleted, per statement. */
const batchSize = 5000;
/** Batches in a row holding no old event after which a run stops. */
const recentBatches = 20;

export async function processPruneEvents(
  ctx: Pick<JobContext, 'store' | 'logger' | 'eventRetention'>,
  signal?: AbortSignal,
): Promise<{ deleted: number; cutoff?: string }> {
  const { days, keepUndelivered } = ctx.eventRetention;
  if (days === undefined) return { deleted: 0 }; // EVENT_RETENTION_DAYS=off on this replica
  const cutoff = new Date(Date.now() - days * 86_400_000);
  const schema = quoteIdentifier(ctx.store.schema);
  const input = { cutoff, keepUndelivered, afterId: '0', maxRows: batchSize };
  let deleted = 0;
  for (let recent = 0; recent < recentBatches; ) {
    signal?.throwIfAborted();
    const batch = await pruneRewardEventBatch(ctx.store.pool, schema, input);
    if (batch.lastId === null) break;
    deleted += batch.deleted;
    recent = batch.old === 0 ? recent + 1 : 0;
    input.afterId = batch.lastId;
  }
  const fields = { deleted, cutoff: cutoff.toISOString(), retentionDays: days, keepUndelivered };
  ctx.logger.info(fields, 'reward events pruned');
  return { deleted, cutoff: fields.cutoff };
}
