/**
 * How far webhook delivery is behind (reward_event_lag, read at every /metrics scrape): the
 * oldest undelivered event through writes, deliveries, a give-up and a replay; a replay beside a
 * delivery; and on a large reward_event_pending, one index read instead of a probe per consumer.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import {
  advanceCursor,
  clearPendingIfDone,
  deliveryLag,
  recordFailure,
  replayFrom,
} from '../../../src/store/event-deliveries.js';
import { createStore, type Store } from '../../../src/store/store.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';
import { reward } from './fixtures.js';

let db: TestDatabase;
let store: Store;
const schema = '"perks"';

beforeAll(async () => {
  db = await createTestDatabase();
  store = createStore({ url: db.url, schema: 'perks', poolSize: 4 });
});
afterAll(async () => {
  await store.close();
  await db.drop();
});

/** A page of `count` new rewards read `secondsAgo` ago; the consumer's events so far. */
async function page(consumerId: string, count: number, secondsAgo: number) {
  const rewards = Array.from({ length: count }, () => reward()).sort((a, b) =>
    a.id < b.id ? -1 : 1,
  );
  const observedAt = new Date(Date.now() - secondsAgo * 1000);
  await store.writeRewardPage({ consumerId, rewards, observedAt });
  const { rows } = await store.pool.query<{ id: string; created_at: Date }>(
    'select id::text, created_at from perks.reward_events where consumer_id = $1 order by id',
    [consumerId],
  );
  return rows;
}

const lag = () => deliveryLag(store.pool, schema);

it('says when the oldest undelivered event was recorded, through deliveries, a give-up and a replay', async () => {
  expect(await lag()).toEqual({ consumers: 0, failed: 0 });
  // lag_a: a page read 60 s before it was written (a slow answer), then one 30 s later.
  await page('lag_a', 2, 60);
  const [a1, a2, a3] = await page('lag_a', 1, 30);
  const [b1, b2] = await page('lag_b', 2, 10);
  if (!a1 || !a2 || !a3 || !b1 || !b2) throw new Error('three and two events expected');

  // The mark holds its oldest event's own time: a reward.created's is its page's read.
  expect(await lag()).toEqual({
    consumers: 2,
    failed: 0,
    oldest: { id: a1.id, createdAt: a1.created_at },
  });

  // Delivered through a2, the last of the first page: the next event's own time, 30 s later.
  for (const { id } of [a1, a2]) await advanceCursor(store.pool, schema, 'lag_a', id);
  expect((await lag()).oldest).toEqual({ id: a3.id, createdAt: a3.created_at });
  expect(a3.created_at.getTime() - a1.created_at.getTime()).toBeGreaterThan(20_000);

  // All of lag_a delivered: its mark keeps that older time (never a newer one) until dropped.
  await advanceCursor(store.pool, schema, 'lag_a', a3.id);
  expect((await lag()).oldest).toEqual({ createdAt: a3.created_at });
  await store.pool.query(`update perks.reward_event_pending set dispatched_at = now()`);
  await clearPendingIfDone(store.pool, schema, 'lag_a');
  expect((await lag()).oldest).toEqual({ id: b1.id, createdAt: b1.created_at });

  // b1 given up: counted as failed, and b2 is the oldest.
  await recordFailure(
    store.pool,
    schema,
    { id: b1.id, consumer_id: 'lag_b' },
    {
      attempts: 3,
      lastError: 'HTTP 500',
    },
  );
  expect(await lag()).toEqual({
    consumers: 1,
    failed: 1,
    oldest: { id: b2.id, createdAt: b2.created_at },
  });

  // Replayed from a1: lag_a is pending again, as old as a1; b1's failure is forgotten.
  await replayFrom(store.pool, schema, a1.id);
  expect(await lag()).toEqual({
    consumers: 2,
    failed: 0,
    oldest: { id: a1.id, createdAt: a1.created_at },
  });
});

it('replays while a delivery moves the cursor of a replayed consumer, without a deadlock', async () => {
  // Two pages of different times: moving past x2 writes lag_x's mark (x3 is 20 s younger).
  await page('lag_x', 2, 20);
  const [x1, x2] = await page('lag_x', 1, 0);
  if (!x1 || !x2) throw new Error('three events expected');
  await recordFailure(
    store.pool,
    schema,
    { id: x1.id, consumer_id: 'lag_x' },
    {
      attempts: 3,
      lastError: 'HTTP 500',
    },
  );
  // Another session holds the failure (a give-up of it in progress): the replay waits there.
  const holder = new pg.Client({ connectionString: db.url });
  await holder.connect();
  try {
    await holder.query('begin');
    await holder.query('select 1 from perks.reward_event_failures for update');
    const waiting = async (sessions: number) => {
      for (;;) {
        const { rows } = await store.pool.query<{ n: number }>(
          `select count(*)::int as n from pg_stat_activity
            where wait_event_type = 'Lock' and datname = current_database()`,
        );
        if ((rows[0]?.n ?? 0) >= sessions) return;
        await sleep(20);
      }
    };
    const replay = replayFrom(store.pool, schema, x1.id);
    await waiting(1);
    // lag_x's delivery moves its cursor meanwhile: it takes the cursor, then the mark.
    const advance = advanceCursor(store.pool, schema, 'lag_x', x2.id);
    await Promise.race([advance, waiting(2)]);
    await holder.query('commit');
    const settled = await Promise.allSettled([replay, advance]);
    expect(settled.map((r) => (r.status === 'rejected' ? String(r.reason) : 'ok'))).toEqual([
      'ok',
      'ok',
    ]);
  } finally {
    await holder.end();
  }
});

it('a delivery moving its cursor never waits for a page write of the same consumer', async () => {
  await page('lag_w', 2, 20);
  const [, w2] = await page('lag_w', 1, 10);
  if (!w2) throw new Error('three events expected');
  // A page write of lag_w in progress: its upsert of the mark holds the row to commit.
  const writer = new pg.Client({ connectionString: db.url });
  await writer.connect();
  const delivery = await store.pool.connect();
  try {
    await writer.query('begin');
    await writer.query(
      `update perks.reward_event_pending set dispatched_at = null where consumer_id = 'lag_w'`,
    );
    // Any wait for a lock fails the statement: the advance takes no lock the write holds.
    await delivery.query(`set lock_timeout = '100ms'`);
    await advanceCursor(delivery, schema, 'lag_w', w2.id);
    const { rows } = await delivery.query<{ through: string }>(
      `select delivered_through::text as through from perks.reward_event_cursors
        where consumer_id = 'lag_w'`,
    );
    expect(rows[0]?.through).toBe(w2.id);
  } finally {
    await delivery.query('reset lock_timeout');
    delivery.release();
    await writer.query('rollback');
    await writer.end();
  }
});

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  'Actual Loops': number;
  Plans?: PlanNode[];
}

const nodesOf = (node: PlanNode): PlanNode[] => [node, ...(node.Plans ?? []).flatMap(nodesOf)];

it('reads the oldest of 100,000 pending consumers by its index, probing one consumer', async () => {
  await store.pool.query(
    `insert into perks.reward_event_pending (consumer_id, oldest_at)
     select 'p' || lpad(g::text, 6, '0'), now() - g * interval '1 second'
       from generate_series(1, 100000) g`,
  );
  await store.pool.query('analyze perks.reward_event_pending');
  const { rows } = await store.pool.query<{ src: string }>(
    `select prosrc as src from pg_proc where oid = 'perks.reward_event_lag()'::regprocedure`,
  );
  const client = await store.pool.connect();
  try {
    await client.query('begin');
    await client.query('set local search_path to perks');
    const explained = await client.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(
      `explain (analyze, format json) ${rows[0]?.src}`,
    );
    const nodes = nodesOf(explained.rows[0]?.['QUERY PLAN'][0].Plan as PlanNode);
    expect(nodes.map((node) => node['Index Name'])).toContain('reward_event_pending_oldest_idx');
    // The consumer's events and cursor are read once, not once per pending consumer.
    const probes = nodes.filter((node) =>
      ['rewards', 'reward_event_log', 'reward_event_cursors'].includes(node['Relation Name'] ?? ''),
    );
    expect(probes.length).toBeGreaterThan(0);
    for (const probe of probes) expect(probe['Actual Loops']).toBeLessThanOrEqual(1);
  } finally {
    await client.query('rollback');
    client.release();
  }
  expect((await lag()).oldest?.id).toBeUndefined(); // p100000: a mark with no event
});
