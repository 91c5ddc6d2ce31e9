/** writeRewardPage against a real PostgreSQL: exact amounts, idempotence, change history. */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { parseRewardPage } from '../../../src/perks/paging.js';
import { SeededRandom } from '../../../src/sandbox/random.js';
import { generateReward } from '../../../src/sandbox/rewards.js';
import { createStore, type RewardRecord, type Store } from '../../../src/store/store.js';
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

async function storedReward(id: string) {
  const { rows } = await store.pool.query<{
    amount: string;
    status: string;
    consumer_status: string;
    xmin: string;
    xmax: string;
    observed_at: Date;
    first_seen_at: Date;
    last_seen_at: Date;
    missing_since: Date | null;
    raw: Record<string, unknown>;
    brand_logo: string | null;
    transaction_external_id: string | null;
  }>(
    `select amount::text, status, consumer_status, xmin::text, xmax::text, observed_at, first_seen_at,
       last_seen_at, missing_since, raw, brand_logo, transaction_external_id
     from perks.rewards where id = $1`,
    [id],
  );
  return rows[0];
}

/** The columns the store must read from a parsed reward's raw item. */
function columnsOf(r: RewardRecord) {
  return {
    id: r.id,
    amount: r.amount,
    type: r.type,
    status: r.status,
    consumer_status: r.consumerStatus,
    created_at: new Date(r.createdAt),
    transaction_external_id: r.transaction?.externalId ?? null,
    transaction_executed_at: r.transaction ? new Date(r.transaction.executedAt) : null,
    brand_name: r.brand.name,
    brand_logo: r.brand.logo ?? null,
  };
}

async function statusChanges(rewardId: string) {
  const { rows } = await store.pool.query<{
    old_status: string;
    new_status: string;
    old_consumer_status: string;
    new_consumer_status: string;
  }>(
    `select old_status, new_status, old_consumer_status, new_consumer_status
     from perks.reward_status_changes where reward_id = $1 order by id`,
    [rewardId],
  );
  return rows;
}

describe('writeRewardPage', () => {
  it('stores every amount form exactly, as numeric', async () => {
    const cases = [
      ['+0012.50', '12.50'],
      ['12.50', '12.50'],
      ['.5', '0.5'],
      ['0.5', '0.5'],
      ['7.', '7'],
      ['7', '7'],
      ['-3', '-3'],
      ['-0.0', '0.0'],
      ['123456789012345678901234567890.123456789', '123456789012345678901234567890.123456789'],
      ['0.000000000000000000000000000001', '0.000000000000000000000000000001'],
    ] as const;
    const rewards = cases.map(([amount]) => reward({ amount }));
    const result = await store.writeRewardPage({
      consumerId: 'amounts',
      rewards,
      observedAt: at('2026-02-01T00:00:00Z'),
    });
    expect(result).toEqual({
      inserted: cases.length,
      updated: 0,
      unchanged: 0,
      statusChanges: 0,
      markedMissing: 0,
    });
    for (const [i, [, stored]] of cases.entries()) {
      const row = await storedReward(rewards[i]?.id ?? '');
      expect(row?.amount).toBe(stored);
    }
  });

  it('refuses an amount that is not a decimal string, writing nothing', async () => {
    const bad = reward({ amount: '1e3' });
    await expect(
      store.writeRewardPage({ consumerId: 'bad', rewards: [bad], observedAt: new Date() }),
    ).rejects.toThrow(/not a decimal string/);
    expect(await storedReward(bad.id)).toBeUndefined();
  });

  it('keeps raw, null transaction and absent logo as received', async () => {
    const gift = reward({ type: 'GIFT', transaction: null, brand: { name: null } });
    gift.raw = { ...gift.raw, unknown_extra: { nested: [1, 'two'] } };
    await store.writeRewardPage({ consumerId: 'gifts', rewards: [gift], observedAt: new Date() });
    const row = await storedReward(gift.id);
    expect(row?.transaction_external_id).toBeNull();
    expect(row?.brand_logo).toBeNull();
    expect(row?.raw).toEqual(gift.raw);
  });

  it("reads every column from the raw item as the client's parse reads it", async () => {
    // The sandbox's generator: every amount form, gifts, null and absent logos, extra fields.
    const rng = new SeededRandom(11, 'columns');
    const items: Record<string, unknown>[] = Array.from({ length: 300 }, () => generateReward(rng));
    const upper = generateReward(rng);
    items.push({
      ...upper,
      id: upper.id.toUpperCase(),
      transaction: { external_id: 'tx_fraction', executed_at: '2025-06-01T08:00:00.5Z' },
    });
    const { items: parsed } = parseRewardPage('test', {
      items,
      meta: { page: 1, per_page: 1000, total: items.length },
    });
    await store.writeRewardPage({ consumerId: 'columns', rewards: parsed, observedAt: new Date() });

    const { rows } = await store.pool.query(
      `select id::text, amount::text, type, status, consumer_status, created_at,
         transaction_external_id, transaction_executed_at, brand_name, brand_logo
       from perks.rewards where consumer_id = 'columns'`,
    );
    const stored = new Map(rows.map((row) => [row.id, row]));
    expect(stored.size).toBe(parsed.length);
    for (const r of parsed) expect(stored.get(r.id), r.id).toEqual(columnsOf(r));
    // The generator's variety did reach the store.
    expect(parsed.some((r) => r.raw.amount !== r.amount)).toBe(true);
    expect(parsed.some((r) => r.transaction === null)).toBe(true);
    expect(parsed.some((r) => r.brand.logo === undefined)).toBe(true);
    expect(parsed.some((r) => r.brand.logo === null)).toBe(true);
  });

  it('writes the items as the API sent them, given the body: the rows of the parsed page', async () => {
    const rng = new SeededRandom(12, 'sent');
    const items = Array.from({ length: 50 }, () => generateReward(rng));
    // Spacing, key order and a number JavaScript cannot hold exactly, as a server may send them.
    const first = { score: '__score__', ...items[0], note: 'extra' };
    const json = `{ "meta": {"page": 1, "per_page": 1000, "total": ${items.length}},
      "items": [${[first, ...items.slice(1)]
        .map((item) => JSON.stringify(item, null, 1))
        .join(',\n')
        .replace('"__score__"', '12345678901234567890.000000001')}] }`;
    const { items: parsed } = parseRewardPage('test', JSON.parse(json));
    await store.writeRewardPage({
      consumerId: 'sent',
      json,
      ids: parsed.map((r) => r.id),
      observedAt: new Date(),
    });

    const { rows: stored } = await store.pool.query(
      `select id::text, amount::text, type, status, consumer_status, created_at,
         transaction_external_id, transaction_executed_at, brand_name, brand_logo,
         raw - 'score' as raw
       from perks.rewards where consumer_id = 'sent'`,
    );
    const byId = new Map(stored.map((row) => [row.id, row]));
    expect(byId.size).toBe(parsed.length);
    for (const r of parsed) {
      const { score: _, ...raw } = r.raw;
      expect(byId.get(r.id), r.id).toEqual({ ...columnsOf(r), raw });
    }
    // The number went in as sent: parsed in JavaScript it would have lost its digits.
    const { rows } = await store.pool.query<{ score: string }>(
      `select raw->>'score' as score from perks.rewards where id = $1`,
      [parsed[0]?.id],
    );
    expect(rows[0]?.score).toBe('12345678901234567890.000000001');
  });

  it('writes a body PostgreSQL refuses as jsonb from its items, parsed again', async () => {
    // JSON.parse takes both; jsonb refuses a \u0000 escape and a number past numeric's range.
    const r = reward();
    const json = `{"items":[${JSON.stringify(r.raw).replace(/}$/, ',"big":1e1000000}')}],
      "meta":{"page":1,"per_page":1000,"total":1,"note":"\\u0000"}}`;
    const { items: parsed } = parseRewardPage('test', JSON.parse(json));
    const result = await store.writeRewardPage({
      consumerId: 'refused_body',
      json,
      ids: parsed.map((reward) => reward.id),
      observedAt: new Date(),
    });
    expect(result).toMatchObject({ inserted: 1 });
    // As every page was written before bodies were sent: JavaScript's Infinity, then null.
    expect((await storedReward(r.id))?.raw).toMatchObject({ id: r.id, big: null });
  });

  it('writes a body listing a reward twice from its items, the last of each id', async () => {
    const r = reward();
    const paid = withStatus(r, 'PAID_IN', 'POOLED');
    const json = JSON.stringify({
      items: [r.raw, paid.raw],
      meta: { page: 1, per_page: 2, total: 2 },
    });
    const result = await store.writeRewardPage({
      consumerId: 'dupes_sent',
      json,
      ids: [r.id, paid.id],
      observedAt: new Date(),
    });
    expect(result).toMatchObject({ inserted: 1, unchanged: 1 });
    expect((await storedReward(r.id))?.status).toBe('PAID_IN');
  });

  it('creates the consumer row for a consumer it has never seen', async () => {
    await store.writeRewardPage({
      consumerId: 'never-seen',
      rewards: [reward()],
      observedAt: new Date(),
    });
    const consumer = await store.getConsumer('never-seen');
    expect(consumer).toMatchObject({ consumerId: 'never-seen', enrolledAt: null });
  });

  it('re-writing the same page changes no row and records no change', async () => {
    const page = [reward(), reward({ amount: '+0001.10' }), reward({ transaction: null })];
    const first = await store.writeRewardPage({
      consumerId: 'idem',
      rewards: page,
      observedAt: at('2026-03-01T00:00:00Z'),
    });
    expect(first.inserted).toBe(3);
    const before = await Promise.all(page.map((r) => storedReward(r.id)));

    const again = await store.writeRewardPage({
      consumerId: 'idem',
      rewards: page,
      observedAt: at('2026-03-01T00:10:00Z'),
    });
    expect(again).toEqual({
      inserted: 0,
      updated: 0,
      unchanged: 3,
      statusChanges: 0,
      markedMissing: 0,
    });
    const after = await Promise.all(page.map((r) => storedReward(r.id)));
    expect(after.map((r) => r?.xmin)).toEqual(before.map((r) => r?.xmin));
    // Not even locked: a row lock sets xmax and writes a WAL record per row.
    expect(after.map((r) => r?.xmax)).toEqual(['0', '0', '0']);
    for (const r of page) expect(await statusChanges(r.id)).toEqual([]);
  });

  it('refreshes last_seen_at of an unchanged reward only once it is over an hour old', async () => {
    const r = reward();
    const t0 = at('2026-03-02T00:00:00Z');
    await store.writeRewardPage({ consumerId: 'seen', rewards: [r], observedAt: t0 });
    await store.writeRewardPage({
      consumerId: 'seen',
      rewards: [r],
      observedAt: at('2026-03-02T00:59:00Z'),
    });
    expect((await storedReward(r.id))?.last_seen_at).toEqual(t0);
    const later = at('2026-03-02T01:01:00Z');
    const result = await store.writeRewardPage({
      consumerId: 'seen',
      rewards: [r],
      observedAt: later,
    });
    expect(result).toEqual({
      inserted: 0,
      updated: 0,
      unchanged: 1,
      statusChanges: 0,
      markedMissing: 0,
    });
    const row = await storedReward(r.id);
    expect(row?.last_seen_at).toEqual(later);
    expect(row?.first_seen_at).toEqual(t0);
    expect(await statusChanges(r.id)).toEqual([]);
  });

  it('records a status change exactly once, with old and new values', async () => {
    const r = reward();
    await store.writeRewardPage({
      consumerId: 'moves',
      rewards: [r],
      observedAt: at('2026-04-01T00:00:00Z'),
    });
    const paidIn = withStatus(r, 'PAID_IN', 'POOLED');
    const moved = await store.writeRewardPage({
      consumerId: 'moves',
      rewards: [paidIn],
      observedAt: at('2026-04-02T00:00:00Z'),
    });
    expect(moved).toEqual({
      inserted: 0,
      updated: 1,
      unchanged: 0,
      statusChanges: 1,
      markedMissing: 0,
    });
    await store.writeRewardPage({
      consumerId: 'moves',
      rewards: [paidIn],
      observedAt: at('2026-04-03T00:00:00Z'),
    });
    expect(await statusChanges(r.id)).toEqual([
      {
        old_status: 'VALIDATED',
        new_status: 'PAID_IN',
        old_consumer_status: 'VALIDATION',
        new_consumer_status: 'POOLED',
      },
    ]);
  });

  it('an amount change is an update but not a status change', async () => {
    const r = reward();
    await store.writeRewardPage({ consumerId: 'amt', rewards: [r], observedAt: at('2026-04-01') });
    const changed = { ...r, amount: '13.00', raw: { ...r.raw, amount: '13.00' } };
    const result = await store.writeRewardPage({
      consumerId: 'amt',
      rewards: [changed],
      observedAt: at('2026-04-02'),
    });
    expect(result).toEqual({
      inserted: 0,
      updated: 1,
      unchanged: 0,
      statusChanges: 0,
      markedMissing: 0,
    });
    expect((await storedReward(r.id))?.amount).toBe('13.00');
  });

  it('never lets an older observation overwrite a newer one', async () => {
    const r = reward();
    const newer = withStatus(r, 'PAID_OUT', 'PAID');
    await store.writeRewardPage({
      consumerId: 'stale',
      rewards: [newer],
      observedAt: at('2026-05-02T00:00:00Z'),
    });
    const stale = await store.writeRewardPage({
      consumerId: 'stale',
      rewards: [r],
      observedAt: at('2026-05-01T00:00:00Z'),
    });
    expect(stale).toEqual({
      inserted: 0,
      updated: 0,
      unchanged: 1,
      statusChanges: 0,
      markedMissing: 0,
    });
    expect(await storedReward(r.id)).toMatchObject({ status: 'PAID_OUT', consumer_status: 'PAID' });
    expect(await statusChanges(r.id)).toEqual([]);
  });

  it('re-checks a row it must write under the lock: a newer write committed meanwhile stands', async () => {
    const r = reward();
    await store.writeRewardPage({
      consumerId: 'held',
      rewards: [r],
      observedAt: at('2026-07-01T00:00:00Z'),
    });
    // Another writer holds the row with a newer observation, not yet committed.
    const other = new pg.Client({ connectionString: db.url });
    await other.connect();
    try {
      await other.query('begin');
      await other.query(
        `update perks.rewards set status = 'PAID_OUT', consumer_status = 'PAID',
           raw = raw || '{"status":"PAID_OUT","consumer_status":"PAID"}',
           observed_at = '2026-07-01T03:00:00Z' where id = $1`,
        [r.id],
      );
      // At this statement's snapshot the row needs the write (older content, older observation).
      const write = store.writeRewardPage({
        consumerId: 'held',
        rewards: [withStatus(r, 'PAID_IN', 'POOLED')],
        observedAt: at('2026-07-01T02:00:00Z'),
      });
      await oneSessionWaitingOnALock(store.pool);
      await other.query('commit');
      expect(await write).toEqual({
        inserted: 0,
        updated: 0,
        unchanged: 1,
        statusChanges: 0,
        markedMissing: 0,
      });
    } finally {
      await other.end();
    }
    expect(await storedReward(r.id)).toMatchObject({ status: 'PAID_OUT', consumer_status: 'PAID' });
    expect(await statusChanges(r.id)).toEqual([]);
  });

  it('two concurrent writers converge on the newest observation with a consistent history', async () => {
    const other = createStore({ url: db.url, schema: 'perks', poolSize: 2 });
    try {
      for (let round = 0; round < 5; round++) {
        const base = Array.from({ length: 50 }, () => reward());
        const t0 = at('2026-06-01T00:00:00Z');
        await store.writeRewardPage({ consumerId: 'race', rewards: base, observedAt: t0 });
        const older = base.map((r) => withStatus(r, 'PAID_IN', 'POOLED'));
        const newer = base.map((r) => withStatus(r, 'PAID_OUT', 'PAID'));
        // Launch order alternates so that either writer may take the row locks first.
        const writes = [
          () =>
            other.writeRewardPage({
              consumerId: 'race',
              rewards: older,
              observedAt: at('2026-06-01T01:00:00Z'),
            }),
          () =>
            store.writeRewardPage({
              consumerId: 'race',
              rewards: newer,
              observedAt: at('2026-06-01T02:00:00Z'),
            }),
        ];
        if (round % 2 === 1) writes.reverse();
        await Promise.all(writes.map((w) => w()));
        for (const r of base) {
          expect(await storedReward(r.id)).toMatchObject({ status: 'PAID_OUT' });
          // The history is a chain from the first status to the stored one, no gap, no repeat.
          const chain = await statusChanges(r.id);
          expect(chain.length).toBeGreaterThanOrEqual(1);
          expect(chain[0]?.old_status).toBe('VALIDATED');
          expect(chain.at(-1)?.new_status).toBe('PAID_OUT');
          for (let i = 1; i < chain.length; i++) {
            expect(chain[i]?.old_status).toBe(chain[i - 1]?.new_status);
          }
        }
      }
    } finally {
      await other.close();
    }
  });

  it('writes a 1000-reward page with one query, then re-writes it with one query', async () => {
    const page = Array.from({ length: 1000 }, (_, i) => reward({ amount: `${i}.99` }));
    // Counted on the connections themselves: one statement on the wire, no BEGIN/COMMIT.
    const query = vi.spyOn(pg.Client.prototype, 'query');
    try {
      const first = await store.writeRewardPage({
        consumerId: 'big',
        rewards: page,
        observedAt: at('2026-07-01T00:00:00Z'),
      });
      expect(first).toEqual({
        inserted: 1000,
        updated: 0,
        unchanged: 0,
        statusChanges: 0,
        markedMissing: 0,
      });
      expect(query).toHaveBeenCalledTimes(1);
      const again = await store.writeRewardPage({
        consumerId: 'big',
        rewards: page.map((r, i) => (i < 10 ? withStatus(r, 'PAID_IN', 'POOLED') : r)),
        observedAt: at('2026-07-01T00:05:00Z'),
      });
      expect(again).toEqual({
        inserted: 0,
        updated: 10,
        unchanged: 990,
        statusChanges: 10,
        markedMissing: 0,
      });
      expect(query).toHaveBeenCalledTimes(2);
    } finally {
      query.mockRestore();
    }
    const { rows } = await store.pool.query<{ n: number }>(
      `select count(*)::int as n from perks.rewards where consumer_id = 'big'`,
    );
    expect(rows[0]?.n).toBe(1000);
  });

  it('keeps one row for a reward listed twice in a page', async () => {
    const r = reward();
    const result = await store.writeRewardPage({
      consumerId: 'dupes',
      rewards: [r, withStatus(r, 'PAID_IN', 'POOLED')],
      observedAt: new Date(),
    });
    expect(result).toEqual({
      inserted: 1,
      updated: 0,
      unchanged: 1,
      statusChanges: 0,
      markedMissing: 0,
    });
    expect((await storedReward(r.id))?.status).toBe('PAID_IN');
  });
});

describe('finishSync: missing rewards', () => {
  it('marks what a complete scan did not list, and clears it when the reward comes back', async () => {
    const [kept, gone, fresh] = [reward(), reward(), reward()];
    if (!kept || !gone || !fresh) throw new Error('unreachable');
    await store.writeRewardPage({
      consumerId: 'scan',
      rewards: [kept, gone],
      observedAt: at('2026-08-01T00:00:00Z'),
    });
    // Another sync stores `fresh` after this scan started: it must not be marked.
    await store.writeRewardPage({
      consumerId: 'scan',
      rewards: [fresh],
      observedAt: at('2026-08-02T00:00:05Z'),
    });
    const scanStartedAt = at('2026-08-02T00:00:00Z');
    const marked = await store.finishSync({
      consumerId: 'scan',
      missing: { seenIds: [kept.id], scanStartedAt },
      at: at('2026-08-02T00:01:00Z'),
    });
    expect(marked).toEqual({ markedMissing: 1 });
    expect((await storedReward(gone.id))?.missing_since).toEqual(at('2026-08-02T00:01:00Z'));
    expect((await storedReward(kept.id))?.missing_since).toBeNull();
    expect((await storedReward(fresh.id))?.missing_since).toBeNull();

    // A second scan keeps the first missing_since.
    const again = await store.finishSync({
      consumerId: 'scan',
      missing: { seenIds: [kept.id], scanStartedAt: at('2026-08-03T00:00:00Z') },
      at: at('2026-08-03T00:01:00Z'),
    });
    expect(again).toEqual({ markedMissing: 1 }); // `fresh` only
    expect((await storedReward(gone.id))?.missing_since).toEqual(at('2026-08-02T00:01:00Z'));

    const back = await store.writeRewardPage({
      consumerId: 'scan',
      rewards: [gone],
      observedAt: at('2026-08-04T00:00:00Z'),
    });
    expect(back).toEqual({
      inserted: 0,
      updated: 1,
      unchanged: 0,
      statusChanges: 0,
      markedMissing: 0,
    });
    expect((await storedReward(gone.id))?.missing_since).toBeNull();
  });

  it('a page read before the scan that marked a reward missing does not bring it back', async () => {
    const late = reward();
    await store.writeRewardPage({
      consumerId: 'late',
      rewards: [late],
      observedAt: at('2026-08-10T00:00:00Z'),
    });
    // The reward is gone upstream at 10:00:01: a scan from 10:00:02 marks it.
    const scan = { seenIds: [], scanStartedAt: at('2026-08-11T10:00:02Z') };
    await store.finishSync({ consumerId: 'late', missing: scan, at: at('2026-08-11T10:00:03Z') });
    // A slow sync's page, read at 10:00:00 while it was still listed, lands after.
    const stale = await store.writeRewardPage({
      consumerId: 'late',
      rewards: [late],
      observedAt: at('2026-08-11T10:00:00Z'),
    });
    expect(stale).toMatchObject({ inserted: 0, updated: 0, unchanged: 1 });
    expect((await storedReward(late.id))?.missing_since).toEqual(at('2026-08-11T10:00:03Z'));
    // A page read after the scan began is newer: it lists the reward again, so it is back.
    await store.writeRewardPage({
      consumerId: 'late',
      rewards: [late],
      observedAt: at('2026-08-11T10:00:04Z'),
    });
    expect((await storedReward(late.id))?.missing_since).toBeNull();
  });

  it('does not touch other consumers', async () => {
    const mine = reward();
    const theirs = reward();
    const t = at('2026-09-01T00:00:00Z');
    await store.writeRewardPage({ consumerId: 'mine', rewards: [mine], observedAt: t });
    await store.writeRewardPage({ consumerId: 'theirs', rewards: [theirs], observedAt: t });
    await store.finishSync({
      consumerId: 'mine',
      missing: { seenIds: [], scanStartedAt: at('2026-09-02T00:00:00Z') },
      at: at('2026-09-02T00:00:00Z'),
    });
    expect((await storedReward(mine.id))?.missing_since).not.toBeNull();
    expect((await storedReward(theirs.id))?.missing_since).toBeNull();
  });
});

describe('finishSync', () => {
  it('marks missing rewards after a consistent scan and sets last_synced_at, in one statement', async () => {
    const [kept, gone] = [reward(), reward()];
    if (!kept || !gone) throw new Error('unreachable');
    await store.writeRewardPage({
      consumerId: 'finish',
      rewards: [kept, gone],
      observedAt: at('2026-09-01T00:00:00Z'),
    });
    const query = vi.spyOn(pg.Pool.prototype, 'query');
    const result = await store.finishSync({
      consumerId: 'finish',
      missing: { seenIds: [kept.id], scanStartedAt: at('2026-09-02T00:00:00Z') },
      at: at('2026-09-02T00:01:00Z'),
    });
    expect(query).toHaveBeenCalledTimes(1);
    query.mockRestore();
    expect(result).toEqual({ markedMissing: 1 });
    expect((await storedReward(gone.id))?.missing_since).toEqual(at('2026-09-02T00:01:00Z'));
    expect((await store.getConsumer('finish'))?.lastSyncedAt).toEqual(at('2026-09-02T00:01:00Z'));
  });

  it('ends a sync in the statement of its last page: one query for a one-page sync', async () => {
    const [kept, gone, changed] = [reward(), reward(), reward()];
    if (!kept || !gone || !changed) throw new Error('unreachable');
    await store.writeRewardPage({
      consumerId: 'one_page',
      rewards: [kept, gone, changed],
      observedAt: at('2026-09-01T00:00:00Z'),
    });
    const query = vi.spyOn(pg.Pool.prototype, 'query');
    const scanStartedAt = at('2026-09-02T00:00:00Z');
    const result = await store.writeRewardPage({
      consumerId: 'one_page',
      rewards: [kept, withStatus(changed, 'PAID_IN', 'POOLED')],
      observedAt: scanStartedAt,
      // `changed` left out of seenIds on purpose: a page's own rewards are never marked.
      finish: { missing: { seenIds: [kept.id], scanStartedAt }, at: scanStartedAt },
    });
    expect(query).toHaveBeenCalledTimes(1);
    query.mockRestore();
    expect(result).toEqual({
      inserted: 0,
      updated: 1,
      unchanged: 1,
      statusChanges: 1,
      markedMissing: 1,
    });
    expect((await storedReward(gone.id))?.missing_since).toEqual(scanStartedAt);
    expect((await storedReward(changed.id))?.missing_since).toBeNull();
    expect((await storedReward(changed.id))?.status).toBe('PAID_IN');
    expect((await store.getConsumer('one_page'))?.lastSyncedAt).toEqual(scanStartedAt);
  });

  it('creates the consumer row when the last page is its first write', async () => {
    const only = reward();
    const t = at('2026-09-05T00:00:00Z');
    const result = await store.writeRewardPage({
      consumerId: 'fresh_consumer',
      rewards: [only],
      observedAt: t,
      finish: { missing: { seenIds: [only.id], scanStartedAt: t }, at: t },
    });
    expect(result).toEqual({
      inserted: 1,
      updated: 0,
      unchanged: 0,
      statusChanges: 0,
      markedMissing: 0,
    });
    expect((await store.getConsumer('fresh_consumer'))?.lastSyncedAt).toEqual(t);
  });

  it('after an inconsistent scan (missing: null) marks nothing, yet records the sync', async () => {
    const [only] = [reward()];
    if (!only) throw new Error('unreachable');
    await store.writeRewardPage({
      consumerId: 'finish_partial',
      rewards: [only],
      observedAt: at('2026-09-01T00:00:00Z'),
    });
    const result = await store.finishSync({
      consumerId: 'finish_partial',
      missing: null,
      at: at('2026-09-03T00:00:00Z'),
    });
    expect(result).toEqual({ markedMissing: 0 });
    expect((await storedReward(only.id))?.missing_since).toBeNull();
    expect((await store.getConsumer('finish_partial'))?.lastSyncedAt).toEqual(
      at('2026-09-03T00:00:00Z'),
    );
  });
});
