/**
 * How far webhook delivery is behind (reward_event_lag, read at every /metrics scrape): the
 * oldest undelivered event through writes, deliveries, a give-up and a replay, and on a large
 * reward_event_pending one index read instead of a probe per pending consumer.
 */
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
  store = createStore({ url: db.url, schema: 'perks', poolSize: 2 });
});
afterAll(async () => {
  await store.close();
  await db.drop();
});

/** A first sync of three rewards, read now; its three reward.created events. */
async function firstSync(consumerId: string) {
  const rewards = [reward(), reward(), reward()].sort((a, b) => (a.id < b.id ? -1 : 1));
  await store.writeRewardPage({ consumerId, rewards, observedAt: new Date() });
  const { rows } = await store.pool.query<{ id: string; created_at: Date }>(
    'select id::text, created_at from perks.reward_events where consumer_id = $1 order by id',
    [consumerId],
  );
  return rows;
}

const lag = () => deliveryLag(store.pool, schema);

it('says when the oldest undelivered event was recorded, through deliveries, a give-up and a replay', async () => {
  expect(await lag()).toEqual({ consumers: 0, failed: 0 });
  const [a1, a2, a3] = await firstSync('lag_a');
  const [b1, b2] = await firstSync('lag_b');
  if (!a1 || !a2 || !a3 || !b1 || !b2) throw new Error('three events each expected');

  // Marked by the write: its transaction's start, a moment after the page was read.
  const written = await lag();
  expect(written).toMatchObject({ consumers: 2, failed: 0, oldest: { id: a1.id } });
  const markedAfterMs = (written.oldest?.createdAt.getTime() ?? 0) - a1.created_at.getTime();
  expect(markedAfterMs).toBeGreaterThanOrEqual(0);
  expect(markedAfterMs).toBeLessThan(5000);

  // Delivered through a1: the next event's own time.
  await advanceCursor(store.pool, schema, 'lag_a', a1.id);
  expect((await lag()).oldest).toEqual({ id: a2.id, createdAt: a2.created_at });

  // All of lag_a delivered: its mark keeps its older time (never a newer one) until dropped.
  for (const { id } of [a2, a3]) await advanceCursor(store.pool, schema, 'lag_a', id);
  expect((await lag()).oldest).toEqual({ createdAt: a3.created_at });
  await store.pool.query(`update perks.reward_event_pending set dispatched_at = now()`);
  await clearPendingIfDone(store.pool, schema, 'lag_a');
  expect((await lag()).oldest?.id).toBe(b1.id);

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
