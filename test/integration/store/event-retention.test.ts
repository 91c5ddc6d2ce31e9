/**
 * The feed's retention against a real PostgreSQL: old events deleted a bounded batch per
 * statement, with their failures; recent ones kept; with webhooks on, none past its consumer's
 * cursor (not yet delivered nor given up); EVENT_RETENTION_DAYS=off deletes nothing.
 */

import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { pino } from 'pino';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { processPruneEvents } from '../../../src/jobs/prune-events.js';
import { oldestEvent, pruneRewardEventBatch } from '../../../src/store/event-deliveries.js';
import { rewardWriteSql } from '../../../src/store/rewards.js';
import { createStore, type Store } from '../../../src/store/store.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';

let db: TestDatabase;
let store: Store;
const logs: Record<string, unknown>[] = [];
const logger = pino({ level: 'info' }, { write: (line: string) => logs.push(JSON.parse(line)) });

beforeAll(async () => {
  db = await createTestDatabase();
  store = createStore({ url: db.url, schema: 'perks', poolSize: 2 });
});
afterAll(async () => {
  await store.close();
  await db.drop();
});
beforeEach(async () => {
  logs.length = 0;
  await store.pool.query(
    `truncate perks.reward_event_log, perks.reward_event_failures, perks.reward_event_cursors,
       perks.reward_status_changes, perks.rewards, perks.consumers restart identity`,
  );
});

/** `count` events of `consumerId` recorded `daysAgo` days ago, as one statement: ids in order. */
async function record(consumerId: string, daysAgo: number, count: number): Promise<void> {
  await store.pool.query(
    `insert into perks.reward_event_log (type, consumer_id, reward_id, data, created_at)
     select 'reward.missing', $1, gen_random_uuid(), '{}', now() - make_interval(days => $2)
       from generate_series(1, $3)`,
    [consumerId, daysAgo, count],
  );
}

/** `count` reward.created events held by their reward rows, first seen `daysAgo` days ago. */
async function recordHeld(consumerId: string, daysAgo: number, count: number): Promise<void> {
  await store.pool.query(
    `with consumer as (
       insert into perks.consumers (consumer_id) values ($1) on conflict do nothing
     )
     insert into perks.rewards (id, consumer_id, amount, type, status, consumer_status,
       created_at, raw, first_seen_at, last_seen_at, observed_at, event_id)
     select gen_random_uuid(), $1, 1, 'CASHBACK', 'VALIDATED', 'VALIDATION', t, '{}', t, t, t,
            nextval('perks.reward_event_ids')
       from generate_series(1, $3), lateral (select now() - make_interval(days => $2) as t) n`,
    [consumerId, daysAgo, count],
  );
}

async function kept(): Promise<Record<string, number>> {
  const { rows } = await store.pool.query<{ consumer_id: string; n: number }>(
    'select consumer_id, count(*)::int as n from perks.reward_events group by 1 order by 1',
  );
  return Object.fromEntries(rows.map((r) => [r.consumer_id, r.n]));
}

const prune = (days: number | undefined, keepUndelivered = false) =>
  processPruneEvents({ store, logger, eventRetention: { days, keepUndelivered } });

describe('reward event retention', () => {
  it('deletes at most max_rows events per statement, the old ones only, in id order', async () => {
    await record('old', 40, 2500);
    await record('new', 1, 10);
    const cutoff = new Date(Date.now() - 30 * 86_400_000);
    const input = { cutoff, keepUndelivered: false, afterId: '0', maxRows: 1000 };
    const first = await pruneRewardEventBatch(store.pool, '"perks"', input);
    expect(first).toEqual({ deleted: 1000, lastId: '1000', old: 1000 });
    expect(await kept()).toEqual({ new: 10, old: 1500 });
    const last = await pruneRewardEventBatch(store.pool, '"perks"', { ...input, afterId: '2000' });
    expect(last).toEqual({ deleted: 500, lastId: '2510', old: 500 });
  });

  it('prunes every old event in batches, keeps the recent ones, and logs the run', async () => {
    await record('old', 40, 12_000);
    await record('new', 29, 300);
    await store.pool.query(
      `insert into perks.reward_event_failures (event_id, consumer_id, attempts, last_error)
       values (5, 'old', 3, 'answered 500'), (12005, 'new', 3, 'answered 500')`,
    );
    const result = await prune(30);
    expect(result.deleted).toBe(12_000);
    expect(await kept()).toEqual({ new: 300 });
    const { rows } = await store.pool.query(
      'select event_id::int from perks.reward_event_failures',
    );
    expect(rows).toEqual([{ event_id: 12005 }]);
    expect(logs.filter((l) => l.msg === 'reward events pruned')).toEqual([
      expect.objectContaining({ deleted: 12_000, retentionDays: 30, cutoff: result.cutoff }),
    ]);
    expect((await oldestEvent(store.pool, '"perks"'))?.id).toBe('12001');
  });

  it('reaches old events written after more than a batch of recent ones', async () => {
    await record('new', 0, 6073);
    await record('old', 40, 500);
    expect((await prune(30)).deleted).toBe(500);
    expect(await kept()).toEqual({ new: 6073 });
  });

  it('with webhooks on, keeps each old event its consumer has not had delivered or given up', async () => {
    await record('delivered', 40, 10); // ids 1-10
    await record('behind', 40, 10); // 11-20, delivered through 15
    await record('never', 40, 10); // 21-30, no cursor: nothing delivered
    await store.pool.query(
      `insert into perks.reward_event_cursors (consumer_id, delivered_through)
       values ('delivered', 10), ('behind', 15)`,
    );
    expect((await prune(30, true)).deleted).toBe(15);
    expect(await kept()).toEqual({ behind: 5, never: 10 });
    // Without webhooks, the retention alone decides.
    expect((await prune(30, false)).deleted).toBe(15);
    expect(await kept()).toEqual({});
  });

  it('clears the old reward.created events reward rows hold, with the log, in one id order', async () => {
    await recordHeld('old', 40, 3000); // ids 1-3000
    await record('old', 40, 1000); // 3001-4000
    await recordHeld('behind', 40, 10); // 4001-4010, delivered through 4005
    await recordHeld('new', 1, 20);
    await store.pool.query(
      `insert into perks.reward_event_cursors (consumer_id, delivered_through)
       values ('old', 4000), ('behind', 4005);
       insert into perks.reward_event_failures (event_id, consumer_id, attempts, last_error)
       values (7, 'old', 3, 'answered 500')`,
    );
    const cutoff = new Date(Date.now() - 30 * 86_400_000);
    const input = { cutoff, keepUndelivered: true, afterId: '2500', maxRows: 1000 };
    // A batch across both: 500 held events and the first 500 of the log.
    expect(await pruneRewardEventBatch(store.pool, '"perks"', input)).toEqual({
      deleted: 1000,
      lastId: '3500',
      old: 1000,
    });
    expect((await prune(30, true)).deleted).toBe(3005);
    expect(await kept()).toEqual({ behind: 5, new: 20 });
    const { rows } = await store.pool.query(
      `select (select count(*)::int from perks.rewards) as rewards,
              (select count(*)::int from perks.reward_event_failures) as failures`,
    );
    // The rewards stay; only their events go.
    expect(rows).toEqual([{ rewards: 3030, failures: 0 }]);
  });

  it('locks the rewards it clears in reward id order, as the page statement does: no deadlock', async () => {
    // A low reward id holding the later event, a high one the earlier: both 40 days old, so a
    // page refreshes them (last_seen_at over an hour old) as the prune clears their events.
    const low = '00000000-0000-4000-8000-000000000001';
    const high = 'ffffffff-ffff-4fff-bfff-ffffffffffff';
    const raw = (id: string) => ({
      id,
      amount: '1.00',
      type: 'CASHBACK',
      status: 'VALIDATED',
      consumer_status: 'VALIDATION',
      created_at: '2026-01-01T00:00:00.000Z',
    });
    await store.pool.query(
      `insert into perks.consumers (consumer_id) values ('c_low'), ('c_high')`,
    );
    for (const [id, consumerId] of [
      [high, 'c_high'],
      [low, 'c_low'],
    ] as const) {
      await store.pool.query(
        `insert into perks.rewards (id, consumer_id, amount, type, status, consumer_status,
           created_at, raw, first_seen_at, last_seen_at, observed_at, event_id)
         select $1, $2, 1, 'CASHBACK', 'VALIDATED', 'VALIDATION', '2026-01-01', $3, t, t, t,
                nextval('perks.reward_event_ids')
           from (select now() - interval '40 days' as t) n`,
        [id, consumerId, JSON.stringify(raw(id))],
      );
    }
    // A third session holds the low reward: the page waits on it, holding nothing yet; the
    // prune, in event id order, would take the high one, then wait on the low: once the
    // holder lets go, the page takes the low one and waits on the high one: a deadlock.
    const holder = new pg.Client(db.url);
    const writer = new pg.Client(db.url);
    const pruner = new pg.Client(db.url);
    try {
      for (const client of [holder, writer, pruner]) await client.connect();
      await holder.query('begin');
      await holder.query('select from perks.rewards where id = $1 for update', [low]);
      const now = new Date().toISOString();
      const page = (p: number, consumerId: string) => ({
        p,
        consumer_id: consumerId,
        observed_at: now,
        finish: false,
        mark_missing: false,
        scan_started_at: null,
        at: now,
      });
      const written = writer.query(rewardWriteSql('"perks"'), [
        JSON.stringify([
          { consumer_id: 'c_low', body: { items: [raw(low)] } },
          { consumer_id: 'c_high', body: { items: [raw(high)] } },
        ]),
        JSON.stringify([page(0, 'c_low'), page(1, 'c_high')]),
        '{}',
        ['reward.created'],
      ]);
      await sleep(300);
      const pruned = pruner.query(
        `select * from perks.prune_reward_events(now() - interval '30 days', false, 0, 5000)`,
      );
      await sleep(300);
      await holder.query('commit');
      const outcomes = await Promise.allSettled([written, pruned]);
      expect(outcomes.map((o) => (o.status === 'rejected' ? String(o.reason) : 'ok'))).toEqual([
        'ok',
        'ok',
      ]);
    } finally {
      for (const client of [holder, writer, pruner]) await client.end();
    }
  });

  it('deletes nothing with EVENT_RETENTION_DAYS=off', async () => {
    await record('old', 4000, 5);
    expect(await prune(undefined)).toEqual({ deleted: 0 });
    expect(await kept()).toEqual({ old: 5 });
  });
});
