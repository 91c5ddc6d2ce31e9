/**
 * The coalescing writer against a real PostgreSQL: small pages of concurrent syncs share a
 * statement, yet each page gets its own counts, its own sync end and its own failure.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrate } from '../../../src/store/migrate.js';
import { preparePage, rewardWriteSql } from '../../../src/store/rewards.js';
import { createStore, type RewardRecord, type Store } from '../../../src/store/store.js';
import { rewardEventTypes } from '../../../src/store/types.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';
import { at, reward, withStatus } from './fixtures.js';

let db: TestDatabase;
let store: Store;

beforeAll(async () => {
  db = await createTestDatabase();
  // Pool of 8: one lane of small pages, so concurrent pages must queue and share statements.
  store = createStore({ url: db.url, schema: 'perks', poolSize: 8 });
});
afterAll(async () => {
  await store.close();
  await db.drop();
});

const pageOf = (n: number) => Array.from({ length: n }, () => reward());

async function rowsOf(consumerId: string) {
  const { rows } = await store.pool.query<{ id: string; status: string; missing: boolean }>(
    `select id, status, missing_since is not null as missing from perks.rewards
     where consumer_id = $1 order by id`,
    [consumerId],
  );
  return rows;
}

/** Statements and pages written while `work` runs. */
async function counted<T>(work: () => Promise<T>) {
  const before = { ...store.writes };
  const result = await work();
  return {
    result,
    statements: store.writes.statements - before.statements,
    pages: store.writes.pages - before.pages,
  };
}

describe('RewardWriter', () => {
  it('writes the small pages of concurrent syncs in fewer statements, each with its counts', async () => {
    const t = at('2026-10-01T00:00:00Z');
    const pages = Array.from({ length: 12 }, (_, i) => ({
      consumerId: `many_${i}`,
      rows: pageOf(i + 1),
    }));
    const {
      result,
      statements,
      pages: written,
    } = await counted(() =>
      Promise.all(
        pages.map(({ consumerId, rows }) =>
          store.writeRewardPage({
            consumerId,
            rewards: rows,
            observedAt: t,
            finish: { missing: { seenIds: rows.map((r) => r.id), scanStartedAt: t }, at: t },
          }),
        ),
      ),
    );
    expect(written).toBe(12);
    expect(statements).toBeLessThan(12);
    result.forEach((counts, i) => {
      expect(counts).toEqual({
        inserted: i + 1,
        updated: 0,
        unchanged: 0,
        statusChanges: 0,
        markedMissing: 0,
      });
    });
    for (const { consumerId, rows } of pages) {
      expect((await rowsOf(consumerId)).map((r) => r.id)).toEqual(rows.map((r) => r.id).sort());
      expect((await store.getConsumer(consumerId))?.lastSyncedAt).toEqual(t);
    }
  });

  it('keeps each page to its own consumer: status changes, missing rewards and sync ends', async () => {
    const t0 = at('2026-10-02T00:00:00Z');
    const t1 = at('2026-10-03T00:00:00Z');
    const a = pageOf(3) as [RewardRecord, RewardRecord, RewardRecord];
    const b = pageOf(2) as [RewardRecord, RewardRecord];
    await Promise.all([
      store.writeRewardPage({ consumerId: 'own_a', rewards: a, observedAt: t0 }),
      store.writeRewardPage({ consumerId: 'own_b', rewards: b, observedAt: t0 }),
    ]);
    const [resultA, resultB, resultC] = await Promise.all([
      // a: one status change, a[2] no longer listed: marked missing.
      store.writeRewardPage({
        consumerId: 'own_a',
        rewards: [withStatus(a[0], 'PAID_IN', 'POOLED'), a[1]],
        observedAt: t1,
        finish: { missing: { seenIds: [a[0].id, a[1].id], scanStartedAt: t1 }, at: t1 },
      }),
      // b: an inconsistent scan: nothing marked, yet the sync is recorded.
      store.writeRewardPage({
        consumerId: 'own_b',
        rewards: [b[0]],
        observedAt: t1,
        finish: { missing: null, at: t1 },
      }),
      // c: a sync end without rewards, for a consumer never seen.
      store.finishSync({
        consumerId: 'own_c',
        missing: { seenIds: [], scanStartedAt: t1 },
        at: t1,
      }),
    ]);
    expect(resultA).toEqual({
      inserted: 0,
      updated: 1,
      unchanged: 1,
      statusChanges: 1,
      markedMissing: 1,
    });
    expect(resultB).toEqual({
      inserted: 0,
      updated: 0,
      unchanged: 1,
      statusChanges: 0,
      markedMissing: 0,
    });
    expect(resultC).toEqual({ markedMissing: 0 });
    const rowsA = await rowsOf('own_a');
    expect(rowsA.find((r) => r.id === a[2].id)?.missing).toBe(true);
    expect(rowsA.filter((r) => r.missing)).toHaveLength(1);
    expect((await rowsOf('own_b')).every((r) => !r.missing)).toBe(true);
    for (const consumerId of ['own_a', 'own_b', 'own_c']) {
      expect((await store.getConsumer(consumerId))?.lastSyncedAt).toEqual(t1);
    }
  });

  it('fails only the page PostgreSQL refuses; its neighbours are written', async () => {
    const t = at('2026-10-04T00:00:00Z');
    const good = Array.from({ length: 6 }, (_, i) => ({
      consumerId: `good_${i}`,
      rows: pageOf(2),
    }));
    // Passes the writer's own checks, refused by PostgreSQL's timestamptz input (22007).
    const bad = [reward({ createdAt: 'not a time' })];
    const outcomes = await Promise.allSettled([
      ...good
        .slice(0, 3)
        .map(({ consumerId, rows }) =>
          store.writeRewardPage({ consumerId, rewards: rows, observedAt: t }),
        ),
      store.writeRewardPage({ consumerId: 'bad', rewards: bad, observedAt: t }),
      ...good
        .slice(3)
        .map(({ consumerId, rows }) =>
          store.writeRewardPage({ consumerId, rewards: rows, observedAt: t }),
        ),
    ]);
    expect(outcomes.map((o) => o.status)).toEqual([
      'fulfilled',
      'fulfilled',
      'fulfilled',
      'rejected',
      'fulfilled',
      'fulfilled',
      'fulfilled',
    ]);
    expect(String((outcomes[3] as PromiseRejectedResult).reason)).toMatch(/time/);
    for (const { consumerId } of good) expect(await rowsOf(consumerId)).toHaveLength(2);
    expect(await rowsOf('bad')).toHaveLength(0);
  });

  it('never puts two pages of one consumer, or one reward twice, in a statement', async () => {
    const t0 = at('2026-10-05T00:00:00Z');
    const t1 = at('2026-10-05T00:00:01Z');
    const shared = reward();
    // Two pages of one consumer (overlapping syncs), and a reward listed under two consumers
    // at once: in one statement, either would be refused (a consumer's rows joined twice, a
    // row updated twice). The first write takes the lane; the others queue together.
    const results = await Promise.all([
      store.writeRewardPage({ consumerId: 'lane_taker', rewards: pageOf(1), observedAt: t0 }),
      store.writeRewardPage({ consumerId: 'twice', rewards: pageOf(2), observedAt: t0 }),
      store.writeRewardPage({ consumerId: 'twice', rewards: pageOf(3), observedAt: t1 }),
      store.writeRewardPage({ consumerId: 'holder_1', rewards: [shared], observedAt: t0 }),
      store.writeRewardPage({ consumerId: 'holder_2', rewards: [shared], observedAt: t1 }),
    ]);
    expect(results.map((r) => r.inserted + r.updated)).toEqual([1, 2, 3, 1, 1]);
    expect(await rowsOf('twice')).toHaveLength(5);
    // The newer observation wins, whichever statement ran first.
    expect((await rowsOf('holder_2')).map((r) => r.id)).toEqual([shared.id]);
  });

  it('writes at most half of its writers in one statement', async () => {
    // 8 writers: statements of 4 pages at most. The first page takes the lane alone, the other
    // 23 queue behind it: 1 + ceil(23 / 4) statements at least. Uncapped, 2 would do.
    const capped = createStore({ url: db.url, schema: 'perks', poolSize: 8 }, { writers: 8 });
    try {
      const t = at('2026-10-05T12:00:00Z');
      const results = await Promise.all(
        Array.from({ length: 24 }, (_, i) =>
          capped.writeRewardPage({ consumerId: `capped_${i}`, rewards: pageOf(2), observedAt: t }),
        ),
      );
      expect(results.every((r) => r.inserted === 2)).toBe(true);
      expect(capped.writes.pages).toBe(24);
      expect(capped.writes.statements).toBeGreaterThanOrEqual(7);
    } finally {
      await capped.close();
    }
  });

  it('writes a large page alone, without waiting for the small ones', async () => {
    const t = at('2026-10-06T00:00:00Z');
    const { result, statements } = await counted(() =>
      store.writeRewardPage({ consumerId: 'large', rewards: pageOf(500), observedAt: t }),
    );
    expect(result.inserted).toBe(500);
    expect(statements).toBe(1);
  });

  it('ends a sync whose scan listed 150,000 rewards', async () => {
    const t = at('2026-10-07T00:00:00Z');
    const kept = reward();
    const gone = reward();
    await store.writeRewardPage({ consumerId: 'huge', rewards: [kept, gone], observedAt: t });
    const seenIds = [kept.id, ...Array.from({ length: 150_000 }, () => reward().id)];
    const later = at('2026-10-08T00:00:00Z');
    const result = await store.finishSync({
      consumerId: 'huge',
      missing: { seenIds, scanStartedAt: later },
      at: later,
    });
    expect(result).toEqual({ markedMissing: 1 });
    expect((await rowsOf('huge')).find((r) => r.id === gone.id)?.missing).toBe(true);
  });

  it('never JIT-compiles a write, with no startup option PgBouncer would refuse', async () => {
    // JIT is off inside write_reward_pages (its SET clause, checked below); the statement that
    // calls it is a function scan estimated far below jit_above_cost, so the pool's
    // connections need no `-c jit=off`.
    const { rows } = await store.pool.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(
      `explain (format json) ${rewardWriteSql('perks')}`,
      ['[]', '[]', '{}', '{}'],
    );
    const { rows: setting } = await store.pool.query<{ cost: number }>(
      "select current_setting('jit_above_cost')::float8 as cost",
    );
    const plan = rows[0]?.['QUERY PLAN'][0].Plan;
    expect(plan?.['Node Type']).toBe('Function Scan');
    expect(plan?.['Total Cost']).toBeLessThan((setting[0]?.cost ?? 0) / 1000);
  });

  it("plans the write statement as the function does: index probes only, the scan's ids hashed", async () => {
    // The statement runs inside write_reward_pages with the function's own settings: a
    // generic plan, sequential scans off. Planned here as the function plans it, on new empty
    // tables: there, a generic plan with sequential scans allowed scans rewards twice.
    await migrate({ databaseUrl: db.url, schema: 'perks_plan' });
    const { rows: fn } = await store.pool.query<{ src: string; config: string[] }>(
      `select prosrc as src, proconfig as config from pg_proc
       where oid = 'perks_plan.write_reward_pages(jsonb, jsonb, uuid[], text[])'::regprocedure`,
    );
    expect(fn[0]?.config).toEqual(
      expect.arrayContaining([
        'plan_cache_mode=force_generic_plan',
        'enable_seqscan=off',
        'jit=off',
      ]),
    );
    const body = /return query([\s\S]*);\s*end\s*$/.exec(fn[0]?.src ?? '')?.[1];
    expect(body).toBeDefined();
    const page = preparePage({ consumerId: 'plan', rewards: pageOf(10), observedAt: new Date() });
    const pages = JSON.stringify([
      { p: 0, consumer_id: 'plan', observed_at: new Date(), finish: true, mark_missing: true },
    ]);
    const client = await store.pool.connect();
    try {
      await client.query('begin');
      await client.query('set local search_path to perks_plan');
      await client.query('set local plan_cache_mode = force_generic_plan');
      await client.query('set local enable_seqscan = off');
      await client.query(`prepare write_plan(jsonb, jsonb, uuid[], text[]) as ${body}`);
      // EXPLAIN EXECUTE takes literals, not bind parameters.
      const literal = (text: string) => client.escapeLiteral(text);
      const { rows } = await client.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(
        `explain (format json) execute write_plan(${literal(`[${page.entryJson}]`)}, ${literal(pages)},
           ${literal(`{${page.ids.join(',')}}`)}, ${literal(`{${rewardEventTypes.join(',')}}`)})`,
      );
      const plan = rows[0]?.['QUERY PLAN'][0].Plan;
      expect(plan).toBeDefined();
      expect(nodeTypes(plan as PlanNode)).not.toContain('Seq Scan');
      expect(nodeTypes(plan as PlanNode)).toContain('Index Scan');
      // A sequential scan that could not be avoided would cost 10^10 with them off.
      expect(plan?.['Total Cost']).toBeLessThan(1_000_000);
      // The ids a scan listed are hashed once, not searched for each of the consumer's rows.
      expect(JSON.stringify(plan)).toContain('hashed SubPlan');
    } finally {
      await client.query('rollback');
      client.release();
    }
  });
});

interface PlanNode {
  'Node Type': string;
  'Total Cost': number;
  Plans?: PlanNode[];
}

function nodeTypes(node: PlanNode): string[] {
  return [node['Node Type'], ...(node.Plans ?? []).flatMap(nodeTypes)];
}
