/**
 * The reward events feed against a real PostgreSQL: each change of a reward writes its event
 * in the statement of the change, of the types asked for, with its consumer marked pending and
 * one NOTIFY per statement at commit.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import {
  advanceCursor,
  replayFrom,
  undeliveredEvents,
} from '../../../src/store/event-deliveries.js';
import {
  preparePage,
  rewardWriteSql,
  type WriteRewardPageInput,
  writeRewardPages,
} from '../../../src/store/rewards.js';
import { createStore, type RewardRecord, type Store } from '../../../src/store/store.js';
import { type RewardEventType, rewardEventTypes } from '../../../src/store/types.js';
import {
  createTestDatabase,
  oneSessionWaitingOnALock,
  type TestDatabase,
} from '../../support/database.js';
import { at, reward, withStatus } from './fixtures.js';

let db: TestDatabase;
let store: Store;

beforeAll(async () => {
  db = await createTestDatabase();
  store = createStore({ url: db.url, schema: 'perks', poolSize: 4 });
});
afterAll(async () => {
  await store.close();
  await db.drop();
});

interface EventRow {
  id: number;
  type: string;
  consumer_id: string;
  user_id: string | null;
  reward_id: string;
  data: { reward: Record<string, unknown> } & Record<string, unknown>;
}

async function events(where = 'true', params: unknown[] = []): Promise<EventRow[]> {
  const { rows } = await store.pool.query<EventRow>(
    `select id::int, type, consumer_id, user_id, reward_id, data from perks.reward_events
     where ${where} order by id`,
    params,
  );
  return rows;
}

const eventsOf = (consumerId: string) => events('consumer_id = $1', [consumerId]);

async function lastEventId(): Promise<number> {
  const { rows } = await store.pool.query<{ id: number }>(
    'select coalesce(max(id), 0)::int as id from perks.reward_events',
  );
  return rows[0]?.id ?? 0;
}

async function pending(consumerIds: string[]) {
  const { rows } = await store.pool.query<{ consumer_id: string; dispatched: boolean }>(
    `select consumer_id, dispatched_at is not null as dispatched from perks.reward_event_pending
     where consumer_id = any($1) order by consumer_id`,
    [consumerIds],
  );
  return rows;
}

/** data.reward as the stored columns say it should be. */
async function storedReward(id: string) {
  const { rows } = await store.pool.query<{
    id: string;
    amount: string;
    type: string;
    status: string;
    consumer_status: string;
    created_at: Date;
    transaction_external_id: string | null;
    transaction_executed_at: Date | null;
    brand_name: string | null;
    brand_logo: string | null;
  }>(
    `select id, amount::text as amount, type, status, consumer_status, created_at,
       transaction_external_id, transaction_executed_at, brand_name, brand_logo
     from perks.rewards where id = $1`,
    [id],
  );
  const r = rows[0];
  if (!r) throw new Error(`reward ${id} is not stored`);
  return {
    id: r.id,
    amount: r.amount,
    type: r.type,
    status: r.status,
    consumer_status: r.consumer_status,
    created_at: r.created_at.toISOString(),
    transaction:
      r.transaction_external_id === null && r.transaction_executed_at === null
        ? null
        : {
            external_id: r.transaction_external_id,
            executed_at: r.transaction_executed_at?.toISOString() ?? null,
          },
    brand:
      r.brand_name === null && r.brand_logo === null
        ? null
        : { name: r.brand_name, logo: r.brand_logo },
  };
}

const write = (consumerId: string, rewards: RewardRecord[], observedAt: Date) =>
  store.writeRewardPage({ consumerId, rewards, observedAt });

/** A complete scan that listed `seen` (and wrote nothing else), ending at `when`. */
const completeScan = (consumerId: string, seen: RewardRecord[], when: Date) =>
  store.finishSync({
    consumerId,
    missing: { seenIds: seen.map((r) => r.id), scanStartedAt: when },
    at: when,
  });

/** One call of the write function on `client` (inside its transaction), page without finish. */
async function writeOn(client: pg.Client, input: WriteRewardPageInput) {
  const page = preparePage(input);
  const pages = [
    { p: 0, consumer_id: input.consumerId, observed_at: input.observedAt, finish: false },
  ];
  await client.query(rewardWriteSql('perks'), [
    `[${page.entryJson}]`,
    JSON.stringify(pages),
    '{}',
    rewardEventTypes,
  ]);
}

const byId = (a: RewardRecord, b: RewardRecord) => (a.id < b.id ? -1 : 1);

describe('reward events', () => {
  it('records one reward.created per new reward, with the reward as stored and the user id', async () => {
    await store.recordEnrollment({
      consumerId: 'ev_alice',
      userId: 'user-alice',
      outcome: 'created',
      extraConsents: [],
      removedConsents: [],
      at: at('2026-01-01T00:00:00Z'),
    });
    const alice = [reward({ amount: '+0012.50' }), reward({ amount: '.5' }), reward()];
    const gift = reward({ type: 'GIFT', amount: '7', transaction: null, brand: { name: null } });
    const bob = [gift, reward({ brand: { name: 'Bolt' } })];
    const t = at('2026-02-01T00:00:00Z');
    await write('ev_alice', alice, t);
    await write('ev_bob', bob, t);

    const aliceEvents = await eventsOf('ev_alice');
    const bobEvents = await eventsOf('ev_bob');
    expect(aliceEvents.map((e) => [e.type, e.reward_id, e.user_id])).toEqual(
      [...alice].sort(byId).map((r) => ['reward.created', r.id, 'user-alice']),
    );
    expect(bobEvents.map((e) => [e.type, e.reward_id, e.user_id])).toEqual(
      [...bob].sort(byId).map((r) => ['reward.created', r.id, null]),
    );
    for (const e of [...aliceEvents, ...bobEvents]) {
      expect(e.data).toEqual({ reward: await storedReward(e.reward_id) });
    }
    // The figures themselves: the numeric's text, UTC times with milliseconds, null objects.
    const first = alice[0] as RewardRecord;
    expect(aliceEvents.find((e) => e.reward_id === first.id)?.data).toEqual({
      reward: {
        id: first.id,
        amount: '12.50',
        type: 'CASHBACK',
        status: 'VALIDATED',
        consumer_status: 'VALIDATION',
        created_at: '2026-01-02T03:04:05.000Z',
        transaction: {
          external_id: `tx-${first.id.slice(0, 8)}`,
          executed_at: '2026-01-01T10:00:00.000Z',
        },
        brand: { name: 'Acme', logo: 'https://cdn.example/acme.png' },
      },
    });
    expect(aliceEvents.find((e) => e.reward_id === alice[1]?.id)?.data.reward.amount).toBe('0.5');
    expect(bobEvents.find((e) => e.reward_id === gift.id)?.data.reward).toMatchObject({
      type: 'GIFT',
      amount: '7',
      transaction: null,
      brand: null,
    });
    expect(bobEvents.find((e) => e.reward_id === bob[1]?.id)?.data.reward.brand).toEqual({
      name: 'Bolt',
      logo: null,
    });
  });

  it('records reward.status_changed with the previous statuses, once', async () => {
    const r = reward();
    await write('ev_moves', [r], at('2026-03-01T00:00:00Z'));
    const before = await lastEventId();
    const paid = withStatus(r, 'PAID_IN', 'POOLED');
    const result = await write('ev_moves', [paid], at('2026-03-02T00:00:00Z'));
    expect(result.statusChanges).toBe(1);
    await write('ev_moves', [paid], at('2026-03-03T00:00:00Z'));
    const moved = await events('id > $1', [before]);
    expect(moved).toHaveLength(1);
    expect(moved[0]).toMatchObject({ type: 'reward.status_changed', reward_id: r.id });
    expect(moved[0]?.data).toEqual({
      reward: await storedReward(r.id),
      previous_status: 'VALIDATED',
      previous_consumer_status: 'VALIDATION',
    });
    expect(moved[0]?.data.reward).toMatchObject({ status: 'PAID_IN', consumer_status: 'POOLED' });
  });

  it('holds a new reward.created on the reward row, and moves it to the log, as it was, when the reward changes', async () => {
    const [r, s] = [reward(), reward()] as [RewardRecord, RewardRecord];
    await write('ev_held', [r, s], at('2026-03-01T00:00:00Z'));
    const created = await eventsOf('ev_held');
    const asCreated = await storedReward(r.id);
    const held = async () => {
      const { rows } = await store.pool.query<{ rewards: number; log: number }>(
        `select (select count(*)::int from perks.rewards
                  where consumer_id = 'ev_held' and event_id is not null) as rewards,
                (select count(*)::int from perks.reward_event_log
                  where consumer_id = 'ev_held') as log`,
      );
      return rows[0];
    };
    // A first sync writes no second row: both events are their rows'.
    expect(created.map((e) => e.type)).toEqual(['reward.created', 'reward.created']);
    expect(await held()).toEqual({ rewards: 2, log: 0 });
    // Unchanged content (a refresh of last_seen_at, missing then restored) leaves them there.
    await write('ev_held', [r, s], at('2026-03-01T05:00:00Z'));
    await completeScan('ev_held', [s], at('2026-03-02T00:00:00Z'));
    await write('ev_held', [r, s], at('2026-03-03T00:00:00Z'));
    expect(await held()).toEqual({ rewards: 2, log: 2 });
    // A status change moves r's reward.created, under its id, with the status it showed.
    const paid = withStatus(r, 'PAID_IN', 'POOLED');
    await write('ev_held', [paid, s], at('2026-03-04T00:00:00Z'));
    expect(await held()).toEqual({ rewards: 1, log: 4 });
    const after = await eventsOf('ev_held');
    expect(after.map((e) => [e.id, e.type, e.reward_id])).toEqual([
      ...created.map((e) => [e.id, 'reward.created', e.reward_id]),
      [expect.any(Number), 'reward.missing', r.id],
      [expect.any(Number), 'reward.restored', r.id],
      [expect.any(Number), 'reward.status_changed', r.id],
    ]);
    expect(after.find((e) => e.type === 'reward.created' && e.reward_id === r.id)?.data).toEqual({
      reward: asCreated,
    });
    expect(asCreated).toMatchObject({ status: 'VALIDATED', consumer_status: 'VALIDATION' });
  });

  it('reads the feed in index order, by id and by consumer: nothing sorts the rewards', async () => {
    // Sorting is disabled, so a plan holds a Sort only where no index order can replace it
    // (a WHERE inside one of the view's branches does that to PostgreSQL 15).
    const client = await store.pool.connect();
    try {
      await client.query('begin');
      await client.query('set local enable_sort = off');
      await client.query('set local enable_seqscan = off');
      for (const query of [
        'select * from perks.reward_events where id > 5 order by id limit 100',
        `select * from perks.reward_events where consumer_id = 'ev_held' and id > 5 order by id limit 100`,
        'select * from perks.reward_events order by id desc limit 10',
      ]) {
        const { rows } = await client.query<{ 'QUERY PLAN': string }>(`explain ${query}`);
        const plan = rows.map((r) => r['QUERY PLAN']).join('\n');
        expect(plan, query).toContain('Merge Append');
        expect(plan, query).not.toMatch(/\bSort\b(?! Key)/);
      }
    } finally {
      await client.query('rollback');
      client.release();
    }
  });

  it('records no event for an amount change, an unchanged re-sync or a last_seen_at refresh', async () => {
    const r = reward();
    await write('ev_quiet', [r], at('2026-03-01T00:00:00Z'));
    const before = await lastEventId();
    const amount = { ...r, amount: '13.00', raw: { ...r.raw, amount: '13.00' } };
    expect(await write('ev_quiet', [amount], at('2026-03-01T00:10:00Z'))).toMatchObject({
      updated: 1,
    });
    await write('ev_quiet', [amount], at('2026-03-01T00:20:00Z'));
    await write('ev_quiet', [amount], at('2026-03-01T05:00:00Z')); // refreshes last_seen_at
    expect(await events('id > $1', [before])).toEqual([]);
  });

  it('records reward.missing after a complete scan, then reward.restored when it is listed again', async () => {
    const [kept, gone] = [reward(), reward()] as [RewardRecord, RewardRecord];
    await write('ev_scan', [kept, gone], at('2026-04-01T00:00:00Z'));
    let before = await lastEventId();
    expect(await completeScan('ev_scan', [kept], at('2026-04-02T00:00:00Z'))).toEqual({
      markedMissing: 1,
    });
    const missing = await events('id > $1', [before]);
    expect(missing.map((e) => [e.type, e.reward_id])).toEqual([['reward.missing', gone.id]]);
    expect(missing[0]?.data).toEqual({ reward: await storedReward(gone.id) });
    // A second scan does not mark it again.
    await completeScan('ev_scan', [kept], at('2026-04-03T00:00:00Z'));
    expect(await events('id > $1', [before])).toHaveLength(1);

    before = await lastEventId();
    await write('ev_scan', [kept, gone], at('2026-04-04T00:00:00Z'));
    const restored = await events('id > $1', [before]);
    expect(restored.map((e) => [e.type, e.reward_id])).toEqual([['reward.restored', gone.id]]);
    expect(restored[0]?.data).toEqual({ reward: await storedReward(gone.id) });

    // Back with a new status: restored, then status_changed, in one statement.
    await completeScan('ev_scan', [kept], at('2026-04-05T00:00:00Z'));
    before = await lastEventId();
    await write('ev_scan', [withStatus(gone, 'PAID_OUT', 'PAID')], at('2026-04-06T00:00:00Z'));
    expect((await events('id > $1', [before])).map((e) => e.type)).toEqual([
      'reward.restored',
      'reward.status_changed',
    ]);
  });

  it('numbers the events of one statement in reward id order, new rewards first, across consumers', async () => {
    const a = Array.from({ length: 6 }, () => reward());
    const b = Array.from({ length: 6 }, () => reward());
    const t0 = at('2026-05-01T00:00:00Z');
    await write('ev_order_a', a.slice(0, 3), t0);
    const before = await lastEventId();
    // One statement: consumer a gets 2 status changes, 3 new rewards and 1 missing (its first
    // one, left out of the scan); consumer b gets 6 new rewards.
    const t1 = at('2026-05-02T00:00:00Z');
    const pageA = [...a.slice(1, 3).map((r) => withStatus(r, 'PAID_IN', 'POOLED')), ...a.slice(3)];
    const pages = [
      preparePage({
        consumerId: 'ev_order_a',
        rewards: pageA,
        observedAt: t1,
        finish: { missing: { seenIds: pageA.map((r) => r.id), scanStartedAt: t1 }, at: t1 },
      }),
      preparePage({ consumerId: 'ev_order_b', rewards: b, observedAt: t1 }),
    ];
    const counts = await writeRewardPages(
      store.pool,
      rewardWriteSql('perks'),
      pages,
      rewardEventTypes,
    );
    expect(counts.map((c) => [c.inserted, c.statusChanges, c.markedMissing])).toEqual([
      [3, 2, 1],
      [6, 0, 0],
    ]);
    const added = await events('id > $1', [before]);
    expect(added).toHaveLength(12);
    expect(added.map((e) => e.id)).toEqual(added.map((_, i) => before + 1 + i));
    // The new rewards' reward.created first (their rows take their ids), then the others.
    const created = [...a.slice(3), ...b].map((r) => r.id).sort();
    const others = a
      .slice(0, 3)
      .map((r) => r.id)
      .sort();
    expect(added.map((e) => e.reward_id)).toEqual([...created, ...others]);
    expect(added.filter((e) => e.type === 'reward.missing').map((e) => e.reward_id)).toEqual([
      a[0]?.id,
    ]);
  });

  it('records only the types asked for, and none when asked for none', async () => {
    const only = createStore(
      { url: db.url, schema: 'perks', poolSize: 1 },
      { eventTypes: ['reward.status_changed'] },
    );
    const none = createStore({ url: db.url, schema: 'perks', poolSize: 1 }, { eventTypes: [] });
    try {
      const [r, s] = [reward(), reward()] as [RewardRecord, RewardRecord];
      const t = (day: number) => at(`2026-06-0${day}T00:00:00Z`);
      await only.writeRewardPage({ consumerId: 'ev_only', rewards: [r, s], observedAt: t(1) });
      expect(await eventsOf('ev_only')).toEqual([]);
      const changed = await only.writeRewardPage({
        consumerId: 'ev_only',
        rewards: [withStatus(r, 'PAID_IN', 'POOLED')],
        observedAt: t(2),
        finish: { missing: { seenIds: [r.id], scanStartedAt: t(2) }, at: t(2) },
      });
      expect(changed).toMatchObject({ statusChanges: 1, markedMissing: 1 });
      expect((await eventsOf('ev_only')).map((e) => [e.type, e.reward_id])).toEqual([
        ['reward.status_changed', r.id],
      ]);

      const n = reward();
      await none.writeRewardPage({ consumerId: 'ev_none', rewards: [n], observedAt: t(1) });
      const moved = await none.writeRewardPage({
        consumerId: 'ev_none',
        rewards: [withStatus(n, 'PAID_IN', 'POOLED')],
        observedAt: t(2),
      });
      await none.finishSync({
        consumerId: 'ev_none',
        missing: { seenIds: [], scanStartedAt: t(3) },
        at: t(3),
      });
      expect(moved.statusChanges).toBe(1);
      expect(await eventsOf('ev_none')).toEqual([]);
      expect(await pending(['ev_none'])).toEqual([]);
    } finally {
      await only.close();
      await none.close();
    }
  });

  it('writes neither event nor change when the write fails or its transaction rolls back', async () => {
    const before = await lastEventId();
    const bad = reward();
    bad.raw = { ...bad.raw, created_at: 'not a time' };
    await expect(write('ev_failed', [reward(), bad], new Date())).rejects.toThrow(/timestamp/);

    const client = new pg.Client(db.url);
    await client.connect();
    const r = reward();
    try {
      await client.query('begin');
      await writeOn(client, { consumerId: 'ev_rolled_back', rewards: [r], observedAt: new Date() });
      // Inside its transaction the event is there, with its reward.
      const { rows } = await client.query(
        `select type from perks.reward_events where consumer_id = 'ev_rolled_back'`,
      );
      expect(rows).toEqual([{ type: 'reward.created' }]);
      await client.query('rollback');
    } finally {
      await client.end();
    }
    expect(await events('id > $1', [before])).toEqual([]);
    const { rows } = await store.pool.query(
      `select count(*)::int as n from perks.rewards where consumer_id in ('ev_failed', 'ev_rolled_back')`,
    );
    expect(rows[0]?.n).toBe(0);
    expect(await pending(['ev_failed', 'ev_rolled_back'])).toEqual([]);
  });

  it('marks pending the consumers that got events, and a dispatched one dispatchable again', async () => {
    const [r, s] = [reward(), reward()] as [RewardRecord, RewardRecord];
    const sql = rewardWriteSql('perks');
    // One statement, two consumers: ev_mark's reward at `status`, ev_unmarked's unchanged.
    const statement = (
      hour: number,
      status: string,
      types: readonly RewardEventType[] = rewardEventTypes,
    ) => {
      const observedAt = at(`2026-07-01T0${hour}:00:00Z`);
      const pages = [
        preparePage({
          consumerId: 'ev_mark',
          rewards: [withStatus(r, status, 'POOLED')],
          observedAt,
        }),
        preparePage({ consumerId: 'ev_unmarked', rewards: [s], observedAt }),
      ];
      return writeRewardPages(store.pool, sql, pages, types);
    };
    await statement(0, 'VALIDATED', []);
    expect(await pending(['ev_mark', 'ev_unmarked'])).toEqual([]);
    await statement(1, 'PAID_IN');
    expect(await pending(['ev_mark', 'ev_unmarked'])).toEqual([
      { consumer_id: 'ev_mark', dispatched: false },
    ]);
    // A delivery job took it; a statement without its events leaves the mark as it is.
    await store.pool.query(
      `update perks.reward_event_pending set dispatched_at = now() where consumer_id = 'ev_mark'`,
    );
    await statement(2, 'PAID_IN');
    expect(await pending(['ev_mark', 'ev_unmarked'])).toEqual([
      { consumer_id: 'ev_mark', dispatched: true },
    ]);
    // A new event makes it dispatchable again.
    await statement(3, 'PAID_OUT');
    expect(await pending(['ev_mark', 'ev_unmarked'])).toEqual([
      { consumer_id: 'ev_mark', dispatched: false },
    ]);
    expect((await eventsOf('ev_mark')).map((e) => e.type)).toEqual([
      'reward.status_changed',
      'reward.status_changed',
    ]);
  });

  it('takes event ids only once the consumer mark is locked: a consumer commits in id order', async () => {
    const r = reward();
    await write('ev_locked', [r], at('2026-08-01T00:00:00Z'));
    const sequence = async () => {
      const { rows } = await store.pool.query<{ n: string }>(
        `select last_value::text as n from perks.reward_event_ids`,
      );
      return rows[0]?.n;
    };
    // A delivery holds the consumer's mark.
    const holder = new pg.Client(db.url);
    await holder.connect();
    try {
      await holder.query('begin');
      await holder.query(
        `select 1 from perks.reward_event_pending where consumer_id = 'ev_locked' for update`,
      );
      const taken = await sequence();
      const writing = write(
        'ev_locked',
        [withStatus(r, 'PAID_IN', 'POOLED'), reward()],
        new Date(),
      );
      await oneSessionWaitingOnALock(store.pool);
      expect(await sequence()).toBe(taken);
      await holder.query('commit');
      await writing;
      const added = await events('consumer_id = $1 and id > $2', ['ev_locked', Number(taken)]);
      expect(added.map((e) => e.type).sort()).toEqual(['reward.created', 'reward.status_changed']);
    } finally {
      await holder.end();
    }
  });

  it('two first writes of one reward at once: the later one runs again and records the change', async () => {
    const r = reward();
    const paid = withStatus(r, 'PAID_IN', 'POOLED');
    const first = new pg.Client(db.url);
    await first.connect();
    const statements = store.writes.statements;
    try {
      // The first write inserts the reward and holds its locks; the second, whose snapshot
      // does not see it, waits for them, then meets the row at its insert.
      await first.query('begin');
      await writeOn(first, {
        consumerId: 'ev_race',
        rewards: [r],
        observedAt: at('2026-08-02T00:00:00Z'),
      });
      const second = write('ev_race', [paid], at('2026-08-02T00:00:05Z'));
      await oneSessionWaitingOnALock(store.pool);
      await first.query('commit');
      await second;
    } finally {
      await first.end();
    }
    // Refused at its insert (rewards_pkey), then run again over the stored row.
    expect(store.writes.statements - statements).toBe(2);
    const { rows: stored } = await store.pool.query(
      'select status from perks.rewards where id = $1',
      [r.id],
    );
    expect(stored).toEqual([{ status: 'PAID_IN' }]);
    const feed = await eventsOf('ev_race');
    expect(feed.map((e) => [e.type, e.data.reward.status])).toEqual([
      ['reward.created', r.status],
      ['reward.status_changed', 'PAID_IN'],
    ]);
    const { rows } = await store.pool.query(
      'select old_status, new_status from perks.reward_status_changes where reward_id = $1',
      [r.id],
    );
    expect(rows).toEqual([{ old_status: r.status, new_status: 'PAID_IN' }]);
  });

  it('notifies perks_reward_events with the highest id at commit, and not for a write without events', async () => {
    const listener = new pg.Client(db.url);
    await listener.connect();
    const payloads: string[] = [];
    listener.on('notification', (n) => {
      if (n.channel === 'perks_reward_events') payloads.push(n.payload ?? '');
    });
    await listener.query('listen perks_reward_events');
    const open = new pg.Client(db.url);
    await open.connect();
    try {
      const page = Array.from({ length: 5 }, () => reward());
      await write('ev_notify', page, at('2026-09-01T00:00:00Z'));
      const first = await lastEventId();
      // No event: no notification (the next one received is the next write's).
      await write('ev_notify', page, at('2026-09-01T00:10:00Z'));
      // An open transaction's events are notified at its commit, after a later one's.
      await open.query('begin');
      await writeOn(open, {
        consumerId: 'ev_notify_open',
        rewards: [reward()],
        observedAt: new Date(),
      });
      const { rows } = await open.query<{ id: number }>(
        `select max(id)::int as id from perks.reward_events`,
      );
      const openId = rows[0]?.id ?? 0;
      await write('ev_notify_later', [reward(), reward()], new Date());
      const later = await lastEventId();
      await open.query('commit');
      await vi.waitFor(() => expect(payloads).toHaveLength(3), { timeout: 5000, interval: 20 });
      expect(payloads).toEqual([String(first), String(later), String(openId)]);
      expect(openId).toBeLessThan(later);
    } finally {
      await open.end();
      await listener.end();
    }
  });

  it('a replay under a running delivery: the cursor does not pass the replayed events', async () => {
    const consumerId = 'replayed_under_delivery';
    await write(consumerId, [reward(), reward(), reward()].sort(byId), at('2024-05-01T10:00:00Z'));
    const [e1, e2, e3] = (await eventsOf(consumerId)).map((e) => String(e.id));
    if (!e1 || !e2 || !e3) throw new Error('three events expected');
    const cursor = async () => {
      const { rows } = await store.pool.query<{ through: string }>(
        'select delivered_through::text as through from perks.reward_event_cursors where consumer_id = $1',
        [consumerId],
      );
      return rows[0]?.through;
    };
    // A job read e1..e3 and delivered e1; then the operator replays from e1.
    await advanceCursor(store.pool, '"perks"', consumerId, e1);
    await replayFrom(store.pool, '"perks"', e1);
    expect(await cursor()).toBe(String(Number(e1) - 1));
    // The job goes on with the batch it read: e1 is not passed over.
    await advanceCursor(store.pool, '"perks"', consumerId, e2);
    await advanceCursor(store.pool, '"perks"', consumerId, e3);
    expect(await cursor()).toBe(String(Number(e1) - 1));
    const again = await undeliveredEvents(store.pool, '"perks"', consumerId, 10);
    expect(again.map((e) => String(e.id))).toEqual([e1, e2, e3]);
    for (const id of [e1, e2, e3]) await advanceCursor(store.pool, '"perks"', consumerId, id);
    expect(await cursor()).toBe(e3);
    // Never back.
    await advanceCursor(store.pool, '"perks"', consumerId, e2);
    expect(await cursor()).toBe(e3);
  });

  it('write_reward_pages has one signature: the three-argument one of earlier builds is dropped', async () => {
    const { rows } = await store.pool.query(
      `select p.oid::regprocedure::text as signature from pg_proc p
       join pg_namespace n on n.oid = p.pronamespace
       where n.nspname = 'perks' and p.proname = 'write_reward_pages'`,
    );
    expect(rows).toEqual([{ signature: 'perks.write_reward_pages(jsonb,jsonb,uuid[],text[])' }]);
  });
});
