/**
 * Refused reward items against a real PostgreSQL: a page's valid rewards are written while each
 * refused item waits in rejected_rewards, one row per (consumer, reward id), until a valid
 * version is written or a complete sync no longer lists it; a scan that refused one marks
 * nothing missing.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseRewardPage } from '../../../src/perks/paging.js';
import { createStore, type Store } from '../../../src/store/store.js';
import { readSummary } from '../../../src/store/summary.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';
import { at, reward } from './fixtures.js';

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

interface RejectedRow {
  reward_id: string | null;
  raw: string;
  error: string;
  first_seen_at: Date;
  last_seen_at: Date;
}

async function rejected(consumerId: string): Promise<RejectedRow[]> {
  const { rows } = await store.pool.query<RejectedRow>(
    `select reward_id, raw, error, first_seen_at, last_seen_at from perks.rejected_rewards
      where consumer_id = $1 order by reward_id nulls last, raw`,
    [consumerId],
  );
  return rows;
}

async function storedIds(consumerId: string): Promise<string[]> {
  const { rows } = await store.pool.query<{ id: string }>(
    'select id from perks.rewards where consumer_id = $1 order by id',
    [consumerId],
  );
  return rows.map((r) => r.id);
}

/** One API page through the client's parser, then the sync's two writes. */
async function syncPage(
  consumerId: string,
  items: unknown[],
  observedAt: Date,
  finish?: { scanStartedAt: Date },
) {
  const page = parseRewardPage('listRewardPages', {
    items,
    meta: { page: 1, per_page: 1000, total: items.length },
  });
  if (page.rejected.length > 0) {
    await store.recordRejectedRewards(consumerId, page.rejected, observedAt);
  }
  const missing = finish && {
    seenIds: page.items.map((r) => r.id),
    scanStartedAt: finish.scanStartedAt,
    rejected: page.rejected.length > 0,
  };
  const written = await store.writeRewardPage({
    consumerId,
    rewards: page.items,
    observedAt,
    ...(missing ? { finish: { missing, at: observedAt } } : {}),
  });
  return { page, written };
}

const longFraction = `0.${'1'.repeat(20_000)}`;

describe('refused reward items', () => {
  it('writes the valid rewards of a page and keeps each refused item, its field named', async () => {
    const good = [reward(), reward(), reward()];
    const badAmount = reward({ amount: longFraction });
    const badLogo = reward({ brand: { name: 'Acme', logo: 'cdn.example/acme.png' } });
    const noId = { ...reward().raw, id: 'reward-1' };
    const items = [good[0]?.raw, badAmount.raw, good[1]?.raw, badLogo.raw, noId, good[2]?.raw];

    const { written } = await syncPage('rj-page', items, at('2026-03-01T10:00:00Z'));

    expect(written.inserted).toBe(3);
    expect(await storedIds('rj-page')).toEqual(good.map((r) => r.id).sort());
    const rows = await rejected('rj-page');
    expect(rows).toHaveLength(3);
    expect(rows.map(({ reward_id, error }) => ({ reward_id, error }))).toEqual(
      expect.arrayContaining([
        {
          reward_id: badAmount.id,
          error: 'amount: must have at most 131072 digits before the point, 16383 after',
        },
        { reward_id: badLogo.id, error: 'brand.logo: must be an absolute URI' },
        { reward_id: null, error: 'id: must be a uuid' },
      ]),
    );
    const amountRow = rows.find((r) => r.reward_id === badAmount.id);
    expect(JSON.parse(amountRow?.raw ?? '{}')).toEqual(badAmount.raw);
    expect(amountRow?.first_seen_at).toEqual(at('2026-03-01T10:00:00Z'));
    expect((await readSummary(store.pool, 'perks')).rewardsRejected).toBeGreaterThanOrEqual(3);
  });

  it('keeps one row per item as it is seen again; a valid version is written and clears it', async () => {
    const bad = reward({ amount: '12,50' });
    const noId = { ...reward().raw, id: 7 };
    await syncPage('rj-again', [bad.raw, noId], at('2026-03-01T10:00:00Z'));
    await syncPage('rj-again', [bad.raw, noId], at('2026-03-01T11:00:00Z'));
    const seenTwice = await rejected('rj-again');
    expect(seenTwice).toHaveLength(2);
    for (const row of seenTwice) {
      expect(row.first_seen_at).toEqual(at('2026-03-01T10:00:00Z'));
      expect(row.last_seen_at).toEqual(at('2026-03-01T11:00:00Z'));
    }
    // An older sighting (a slow sync) moves nothing back.
    await syncPage('rj-again', [bad.raw], at('2026-03-01T09:00:00Z'));
    expect((await rejected('rj-again'))[0]?.last_seen_at).toEqual(at('2026-03-01T11:00:00Z'));

    const fixed = reward({ id: bad.id, amount: '12.50' });
    const { written } = await syncPage('rj-again', [fixed.raw, noId], at('2026-03-01T12:00:00Z'));
    expect(written.inserted).toBe(1);
    expect(await storedIds('rj-again')).toEqual([bad.id]);
    expect((await rejected('rj-again')).map((r) => r.reward_id)).toEqual([null]);
  });

  it('leaves out a refused item whose reward is stored from a newer page', async () => {
    const stored = reward();
    await syncPage('rj-stale', [stored.raw], at('2026-03-02T10:00:00Z'));
    const older = { ...stored.raw, amount: 'twelve' };
    await syncPage('rj-stale', [older], at('2026-03-02T09:00:00Z'));
    expect(await rejected('rj-stale')).toEqual([]);
  });

  it('a scan that refused an item marks nothing missing; a complete one clears what it no longer lists', async () => {
    const kept = reward();
    const gone = reward();
    const bad = reward({ amount: '1e3' });
    await syncPage('rj-scan', [kept.raw, gone.raw, bad.raw], at('2026-03-03T10:00:00Z'));

    // `gone` unlisted, `kept` refused this time: it may be any stored reward, so none is missing.
    const keptBad = { ...kept.raw, created_at: 'yesterday' };
    const scan = { scanStartedAt: at('2026-03-03T11:00:00Z') };
    const first = await syncPage('rj-scan', [keptBad], at('2026-03-03T11:00:01Z'), scan);
    expect(first.written.markedMissing).toBe(0);
    // The complete scan kept the item it refused and dropped the one it did not see.
    expect((await rejected('rj-scan')).map((r) => [r.reward_id, r.error])).toEqual([
      [kept.id, 'created_at: must be an RFC 3339 date-time in UTC (Z)'],
    ]);

    // Everything valid again: `gone` is missing now, and no rejection is left.
    const again = { scanStartedAt: at('2026-03-03T12:00:00Z') };
    const second = await syncPage('rj-scan', [kept.raw], at('2026-03-03T12:00:01Z'), again);
    expect(second.written.markedMissing).toBe(1);
    expect(await rejected('rj-scan')).toEqual([]);
    const { rows } = await store.pool.query<{ id: string }>(
      `select id from perks.rewards where consumer_id = 'rj-scan' and missing_since is not null`,
    );
    expect(rows.map((r) => r.id)).toEqual([gone.id]);
  });

  it('an incomplete sync removes no rejection', async () => {
    const bad = reward({ amount: '' });
    await syncPage('rj-partial', [bad.raw], at('2026-03-04T10:00:00Z'));
    await store.finishSync({
      consumerId: 'rj-partial',
      missing: null,
      at: at('2026-03-04T11:00:00Z'),
    });
    expect(await rejected('rj-partial')).toHaveLength(1);
    await store.writeRewardPage({
      consumerId: 'rj-partial',
      rewards: [reward({ id: randomUUID() })],
      observedAt: at('2026-03-04T12:00:00Z'),
    });
    expect(await rejected('rj-partial')).toHaveLength(1);
  });
});
