/**
 * Webhook delivery state over reward_events (migration 000005): reward_event_pending (consumers
 * with undelivered events), reward_event_cursors (the last event id delivered or given up, per
 * consumer: delivery goes in id order), reward_event_failures. `schema` is quoted.
 */
import type pg from 'pg';
import { inTransaction } from './transaction.js';

/** The last event id delivered to `consumer` (an SQL expression), 0 for none. */
const deliveredThrough = (schema: string, consumer: string) =>
  `coalesce((select c.delivered_through from ${schema}.reward_event_cursors c
              where c.consumer_id = ${consumer}), 0)`;

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

/** A dispatcher's mark is taken again after this long: a delivery job lost with Redis is not. */
const redispatchAfter = '10 minutes';

/**
 * Claims consumers waiting for a delivery job, then dispatches after the commit: no row stays
 * locked, holding up reward writes, while Redis is slow. A failed dispatch puts the marks back.
 */
export async function dispatchPending(
  pool: pg.Pool,
  schema: string,
  limit: number,
  dispatch: (consumerIds: string[]) => Promise<void>,
): Promise<number> {
  const ids = await inTransaction(pool, async (client) => {
    const { rows } = await client.query<{ consumer_id: string }>(
      `update ${schema}.reward_event_pending set dispatched_at = now()
        where consumer_id in (
          select consumer_id from ${schema}.reward_event_pending
           where dispatched_at is null or dispatched_at < now() - interval '${redispatchAfter}'
           order by consumer_id
           limit $1
             for update skip locked)
        returning consumer_id`,
      [limit],
    );
    return rows.map((r) => r.consumer_id);
  });
  if (ids.length === 0) return 0;
  try {
    await dispatch(ids);
  } catch (error) {
    await pool
      .query(
        `update ${schema}.reward_event_pending set dispatched_at = null
          where consumer_id = any($1::text[])`,
        [ids],
      )
      .catch(() => {});
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
  const { rows } = await pool.query<FeedEvent>(
    `select e.id, e.type, e.consumer_id, e.user_id, e.reward_id, e.data, e.created_at
       from ${schema}.reward_events e
      where e.consumer_id = $1 and e.id > ${deliveredThrough(schema, '$1')}
      order by e.id
      limit $2`,
    [consumerId, limit],
  );
  return rows;
}

export async function advanceCursor(
  db: pg.Pool | pg.PoolClient,
  schema: string,
  consumerId: string,
  eventId: string,
): Promise<void> {
  await db.query(
    `insert into ${schema}.reward_event_cursors as c (consumer_id, delivered_through)
     values ($1, $2)
     on conflict (consumer_id) do update
       set delivered_through = greatest(c.delivered_through, excluded.delivered_through),
           updated_at = now()`,
    [consumerId, eventId],
  );
}

/** Gives an event up: recorded as failed, and the cursor moves past it. */
export async function recordFailure(
  pool: pg.Pool,
  schema: string,
  event: Pick<FeedEvent, 'id' | 'consumer_id'>,
  failure: { attempts: number; lastError: string },
): Promise<void> {
  await inTransaction(pool, async (client) => {
    await client.query(
      `insert into ${schema}.reward_event_failures (event_id, consumer_id, attempts, last_error)
       values ($1, $2, $3, $4)
       on conflict (event_id) do update
         set failed_at = now(), attempts = excluded.attempts, last_error = excluded.last_error`,
      [event.id, event.consumer_id, failure.attempts, failure.lastError.slice(0, 2000)],
    );
    await advanceCursor(client, schema, event.consumer_id, event.id);
  });
}

/**
 * Drops the pending mark once nothing is left to deliver. A write recording an event resets
 * dispatched_at to null in its transaction, so a mark is never dropped under a newer event.
 */
export async function clearPendingIfDone(
  pool: pg.Pool,
  schema: string,
  consumerId: string,
): Promise<void> {
  await pool.query(
    `delete from ${schema}.reward_event_pending p
      where p.consumer_id = $1
        and p.dispatched_at is not null
        and not exists (
          select 1 from ${schema}.reward_events e
           where e.consumer_id = $1 and e.id > ${deliveredThrough(schema, '$1')})`,
    [consumerId],
  );
}

export interface DeliveryLag {
  /** Consumers with events not yet delivered. */
  consumers: number;
  oldest?: { id: string; createdAt: Date };
  /** Events given up. */
  failed: number;
}

/** How far delivery is behind: one index probe per consumer with undelivered events. */
export async function deliveryLag(pool: pg.Pool, schema: string): Promise<DeliveryLag> {
  const { rows } = await pool.query<{
    consumers: number;
    oldest_id: string | null;
    oldest_at: Date | null;
    failed: number;
  }>(
    `select (select count(*)::int from ${schema}.reward_event_pending) as consumers,
            o.id as oldest_id, o.created_at as oldest_at,
            (select count(*)::int from ${schema}.reward_event_failures) as failed
       from (select null) one
       left join lateral (
         select e.id, e.created_at
           from ${schema}.reward_event_pending p
           cross join lateral (
             select e.id, e.created_at from ${schema}.reward_events e
              where e.consumer_id = p.consumer_id
                and e.id > ${deliveredThrough(schema, 'p.consumer_id')}
              order by e.id limit 1) e
          order by e.id limit 1) o on true`,
  );
  const row = rows[0];
  return {
    consumers: row?.consumers ?? 0,
    failed: row?.failed ?? 0,
    ...(row?.oldest_id && row.oldest_at
      ? { oldest: { id: row.oldest_id, createdAt: row.oldest_at } }
      : {}),
  };
}

interface DeliveryRow {
  id: string;
  type: string;
  consumer_id: string;
  created_at: Date;
  state: 'delivered' | 'pending' | 'failed';
  failed_at: Date | null;
  attempts: number | null;
  last_error: string | null;
}

/** The latest events with their delivery state, newest first; only the failed ones with `failed`. */
export async function listDeliveries(
  pool: pg.Pool,
  schema: string,
  options: { failed: boolean; limit: number },
): Promise<DeliveryRow[]> {
  const columns =
    'e.id, e.type, e.consumer_id, e.created_at, f.failed_at, f.attempts, f.last_error';
  const { rows } = await pool.query<DeliveryRow>(
    options.failed
      ? `select ${columns}, 'failed' as state
           from ${schema}.reward_event_failures f
           join ${schema}.reward_events e on e.id = f.event_id
          order by f.event_id desc limit $1`
      : `select ${columns},
                case when f.event_id is not null then 'failed'
                     when e.id <= coalesce(c.delivered_through, 0) then 'delivered'
                     else 'pending' end as state
           from (select * from ${schema}.reward_events order by id desc limit $1) e
           left join ${schema}.reward_event_cursors c on c.consumer_id = e.consumer_id
           left join ${schema}.reward_event_failures f on f.event_id = e.id
          order by e.id desc`,
    [options.limit],
  );
  return rows;
}

/** Delivers every event from `fromId` on again, failures forgotten; returns the consumers. */
export async function replayFrom(pool: pg.Pool, schema: string, fromId: string): Promise<number> {
  return inTransaction(pool, async (client) => {
    const { rows } = await client.query<{ consumer_id: string }>(
      `select distinct consumer_id from ${schema}.reward_events where id >= $1`,
      [fromId],
    );
    const ids = rows.map((r) => r.consumer_id);
    await client.query(
      `update ${schema}.reward_event_cursors
          set delivered_through = least(delivered_through, $1::bigint - 1), updated_at = now()
        where consumer_id = any($2::text[])`,
      [fromId, ids],
    );
    await client.query(`delete from ${schema}.reward_event_failures where event_id >= $1`, [
      fromId,
    ]);
    await client.query(
      `insert into ${schema}.reward_event_pending (consumer_id)
       select unnest($1::text[])
       on conflict (consumer_id) do update set dispatched_at = null`,
      [ids],
    );
    return ids.length;
  });
}
