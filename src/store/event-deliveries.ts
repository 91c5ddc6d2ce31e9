/**
 * Webhook delivery state over the reward_events feed (migrations 000005 and 000008):
 * reward_event_pending (consumers with undelivered events), reward_event_cursors (the last event
 * id delivered or given up, per consumer: delivery goes in id order), reward_event_failures; and
 * the feed's retention. Each operation is a function of migrations/repeatable/ that states its
 * rules. `schema` is quoted.
 */
import type pg from 'pg';

export interface FeedEvent {
  /** bigint, as node-postgres returns it. */
  id: string;
  type: string;
  consumer_id: string;
  user_id: string | null;
  reward_id: string;
  data: Record<string, unknown>;
  created_at: Date;
}

/** Claims consumers waiting for a delivery job, then dispatches them after the commit. */
export async function dispatchPending(
  pool: pg.Pool,
  schema: string,
  limit: number,
  dispatch: (consumerIds: string[]) => Promise<void>,
): Promise<number> {
  const sql = `select consumer_id from ${schema}.claim_reward_event_pending($1) as consumer_id`;
  const { rows } = await pool.query<{ consumer_id: string }>(sql, [limit]);
  const ids = rows.map((r) => r.consumer_id);
  if (ids.length === 0) return 0;
  try {
    await dispatch(ids);
  } catch (error) {
    await pool.query(`select ${schema}.release_reward_event_pending($1)`, [ids]).catch(() => {});
    throw error;
  }
  return ids.length;
}

export async function undeliveredEvents(
  pool: pg.Pool,
  schema: string,
  consumerId: string,
  limit: number,
): Promise<FeedEvent[]> {
  const sql = `select * from ${schema}.undelivered_reward_events($1, $2)`;
  return (await pool.query<FeedEvent>(sql, [consumerId, limit])).rows;
}

export async function advanceCursor(
  db: pg.Pool | pg.PoolClient,
  schema: string,
  consumerId: string,
  eventId: string,
): Promise<void> {
  await db.query(`select ${schema}.advance_reward_event_cursor($1, $2)`, [consumerId, eventId]);
}

/** Gives an event up: recorded as failed, and the cursor moves past it. */
export async function recordFailure(
  pool: pg.Pool,
  schema: string,
  event: Pick<FeedEvent, 'id' | 'consumer_id'>,
  failure: { attempts: number; lastError: string },
): Promise<void> {
  await pool.query(`select ${schema}.record_reward_event_failure($1, $2, $3, $4)`, [
    event.id,
    event.consumer_id,
    failure.attempts,
    failure.lastError.slice(0, 2000),
  ]);
}

/** Drops the pending mark once nothing is left to deliver (never under a newer event). */
export async function clearPendingIfDone(
  pool: pg.Pool,
  schema: string,
  consumerId: string,
): Promise<void> {
  await pool.query(`select ${schema}.clear_reward_event_pending($1)`, [consumerId]);
}

export interface DeliveryLag {
  /** Consumers with events not yet delivered. */
  consumers: number;
  /**
   * When the oldest undelivered event was recorded (reward_event_pending.oldest_at), and its id
   * unless its consumer's delivery has just ended.
   */
  oldest?: { id?: string; createdAt: Date };
  /** Events given up. */
  failed: number;
}

type LagRow = Omit<DeliveryLag, 'oldest'> & { oldest_id: string | null; oldest_at: Date | null };

export async function deliveryLag(pool: pg.Pool, schema: string): Promise<DeliveryLag> {
  const { rows } = await pool.query<LagRow>(`select * from ${schema}.reward_event_lag()`);
  const [row] = rows;
  if (!row) throw new Error('reward_event_lag() returned no row');
  const { consumers, failed, oldest_id: id, oldest_at: createdAt } = row;
  if (!createdAt) return { consumers, failed };
  return { consumers, failed, oldest: { ...(id ? { id } : {}), createdAt } };
}

type DeliveryRow = Pick<FeedEvent, 'id' | 'type' | 'consumer_id' | 'created_at'> & {
  state: 'delivered' | 'pending' | 'failed';
  failed_at: Date | null;
  attempts: number | null;
  last_error: string | null;
};

/** The latest events with their delivery state, newest first; only the failed ones with `failed`. */
export async function listDeliveries(
  pool: pg.Pool,
  schema: string,
  options: { failed: boolean; limit: number },
): Promise<DeliveryRow[]> {
  const sql = `select * from ${schema}.reward_event_deliveries($1, $2)`;
  return (await pool.query<DeliveryRow>(sql, [options.failed, options.limit])).rows;
}

/** Delivers every event from `fromId` on again, failures forgotten; returns the consumers. */
export async function replayFrom(pool: pg.Pool, schema: string, fromId: string): Promise<number> {
  const sql = `select ${schema}.replay_reward_events($1) as n`;
  const { rows } = await pool.query<{ n: number }>(sql, [fromId]);
  return rows[0]?.n ?? 0;
}

type PruneBatch = { deleted: number; lastId: string | null; old: number };

/**
 * One batch of the retention: `maxRows` events read after `afterId`, the old ones deleted. `old`:
 * those read older than the cutoff, deleted or kept; `lastId` null: none left to read.
 */
export async function pruneRewardEventBatch(
  pool: pg.Pool,
  schema: string,
  input: { cutoff: Date; keepUndelivered: boolean; afterId: string; maxRows: number },
): Promise<PruneBatch> {
  const { cutoff, keepUndelivered, afterId, maxRows } = input;
  const sql = `select deleted, last_id as "lastId", old from ${schema}.prune_reward_events($1, $2, $3, $4)`;
  const { rows } = await pool.query<PruneBatch>(sql, [cutoff, keepUndelivered, afterId, maxRows]);
  return rows[0] ?? { deleted: 0, lastId: null, old: 0 };
}

/** The first event the feed still holds, if any. */
export async function oldestEvent(
  pool: pg.Pool,
  schema: string,
): Promise<{ id: string; createdAt: Date } | undefined> {
  const sql = `select id, created_at as "createdAt" from ${schema}.oldest_reward_event()`;
  return (await pool.query<{ id: string; createdAt: Date }>(sql)).rows[0];
}
