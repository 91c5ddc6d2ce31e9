/**
 * The dispatcher's claim on a large reward_event_pending (a first sync of many consumers with
 * webhooks on): it reads its rows by index, no further than its limit, and takes the consumers
 * never handed out first, in consumer order, then the marks older than 10 minutes.
 */

import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';

let db: TestDatabase;
let pool: pg.Pool;

beforeAll(async () => {
  db = await createTestDatabase();
  pool = new pg.Pool({ connectionString: db.url, max: 2 });
  // All but the last 100 handed to a delivery job a moment ago.
  await pool.query(
    `insert into perks.reward_event_pending (consumer_id, dispatched_at)
     select 'c' || lpad(g::text, 6, '0'), case when g <= 99900 then now() end
       from generate_series(1, 100000) g`,
  );
  await pool.query('analyze perks.reward_event_pending');
});

afterAll(async () => {
  await pool?.end();
  await db?.drop();
});

interface PlanNode {
  'Node Type': string;
  'Actual Rows': number;
  'Rows Removed by Filter'?: number;
  Plans?: PlanNode[];
}

const nodesOf = (node: PlanNode): PlanNode[] => [node, ...(node.Plans ?? []).flatMap(nodesOf)];

const claim = async (n: number) =>
  (
    await pool.query<{ id: string }>('select id from perks.claim_reward_event_pending($1) id', [n])
  ).rows
    .map((row) => row.id)
    .sort();

it('claims the last 100 of 100,000 by index, reading no row it does not take', async () => {
  const { rows } = await pool.query<{ src: string }>(
    `select prosrc as src from pg_proc
      where oid = 'perks.claim_reward_event_pending(int)'::regprocedure`,
  );
  const client = await pool.connect();
  try {
    await client.query('begin');
    await client.query('set local search_path to perks');
    await client.query(`prepare claim(int) as ${rows[0]?.src}`);
    const explained = await client.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(
      'explain (analyze, format json) execute claim(100)',
    );
    const nodes = nodesOf(explained.rows[0]?.['QUERY PLAN'][0].Plan as PlanNode);
    expect(nodes.map((node) => node['Node Type'])).not.toContain('Seq Scan');
    expect(Math.max(...nodes.map((node) => node['Actual Rows']))).toBeLessThanOrEqual(100);
    const skipped = nodes.map((node) => node['Rows Removed by Filter'] ?? 0);
    expect(skipped.reduce((a, b) => a + b, 0)).toBe(0);
  } finally {
    await client.query('rollback');
    client.release();
  }
});

it('takes the consumers never handed out first, in order, then the oldest marks past 10 minutes', async () => {
  expect(await claim(3)).toEqual(['c099901', 'c099902', 'c099903']);
  await pool.query('update perks.reward_event_pending set dispatched_at = now()');
  expect(await claim(3)).toEqual([]);
  await pool.query(
    `update perks.reward_event_pending set dispatched_at = now() - interval '11 minutes' - make_interval(secs => right(consumer_id, 1)::int)
      where consumer_id in ('c000007', 'c000008', 'c000009')`,
  );
  // Oldest mark first.
  expect(await claim(2)).toEqual(['c000008', 'c000009']);
  expect(await claim(2)).toEqual(['c000007']);
});
