/** Consumer rows: enrollment, errors, not-enrolled, sync marks and the keyset listing. */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createStore, type Store } from '../../../src/store/store.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';
import { at, reward } from './fixtures.js';

let db: TestDatabase;
let store: Store;

beforeAll(async () => {
  db = await createTestDatabase();
  store = createStore({ url: db.url, schema: 'perks', poolSize: 2 });
});
afterAll(async () => {
  await store.close();
  await db.drop();
});

describe('consumers', () => {
  it('records an enrollment, clearing a previous error', async () => {
    await store.recordConsumerError({
      consumerId: 'c-enroll',
      userId: 'user-1',
      message: 'Perks API answered 502',
      at: at('2026-01-01T00:00:00Z'),
    });
    expect(await store.getConsumer('c-enroll')).toMatchObject({
      userId: 'user-1',
      lastError: 'Perks API answered 502',
      enrolledAt: null,
    });
    await store.recordEnrollment({
      consumerId: 'c-enroll',
      outcome: 'created',
      extraConsents: ['TARGETING'],
      removedConsents: ['STATISTICS'],
      at: at('2026-01-01T00:01:00Z'),
    });
    expect(await store.getConsumer('c-enroll')).toMatchObject({
      consumerId: 'c-enroll',
      userId: 'user-1', // kept: the enrollment did not know it
      enrolledAt: at('2026-01-01T00:01:00Z'),
      enrollmentOutcome: 'created',
      extraConsents: ['TARGETING'],
      removedConsents: ['STATISTICS'],
      lastError: null,
      notEnrolledAt: null,
    });
  });

  it('keeps the first enrollment when a retry answers already_enrolled', async () => {
    const first = at('2026-01-02T00:00:00Z');
    const enrollment = {
      consumerId: 'c-retry',
      extraConsents: [],
      removedConsents: [],
    } as const;
    await store.recordEnrollment({ ...enrollment, outcome: 'created', at: first });
    await store.recordEnrollment({
      ...enrollment,
      outcome: 'already_enrolled',
      at: at('2026-01-02T00:05:00Z'),
    });
    expect(await store.getConsumer('c-retry')).toMatchObject({
      enrolledAt: first,
      enrollmentOutcome: 'created',
    });
  });

  it('stores consents only when the API created the consumer; a 409 keeps what was stored', async () => {
    await store.recordEnrollment({
      consumerId: 'c-consents',
      outcome: 'created',
      extraConsents: ['TARGETING'],
      removedConsents: [],
      at: at('2026-01-02T00:00:00Z'),
    });
    await store.recordEnrollment({
      consumerId: 'c-consents',
      outcome: 'already_enrolled',
      extraConsents: [],
      removedConsents: ['STATISTICS'],
      at: at('2026-01-02T00:05:00Z'),
    });
    expect(await store.getConsumer('c-consents')).toMatchObject({
      extraConsents: ['TARGETING'],
      removedConsents: [],
    });
    // Enrolled before this datastore knew it: the consents it has upstream are unknown.
    await store.recordEnrollment({
      consumerId: 'c-consents-409',
      outcome: 'already_enrolled',
      extraConsents: ['TARGETING'],
      removedConsents: [],
      at: at('2026-01-02T00:05:00Z'),
    });
    expect(await store.getConsumer('c-consents-409')).toMatchObject({
      extraConsents: null,
      removedConsents: null,
    });
  });

  it('re-enrolls a consumer the API said was not enrolled', async () => {
    const enrollment = { consumerId: 'c-again', extraConsents: [], removedConsents: [] } as const;
    await store.recordEnrollment({ ...enrollment, outcome: 'created', at: at('2026-01-03') });
    await store.markNotEnrolled({ consumerId: 'c-again', at: at('2026-01-04') });
    expect((await store.getConsumer('c-again'))?.notEnrolledAt).toEqual(at('2026-01-04'));
    await store.recordEnrollment({
      ...enrollment,
      outcome: 'already_enrolled',
      at: at('2026-01-05'),
    });
    expect(await store.getConsumer('c-again')).toMatchObject({
      enrolledAt: at('2026-01-05'),
      enrollmentOutcome: 'already_enrolled',
      notEnrolledAt: null,
    });
  });

  it('does not mark as not enrolled from a request older than an enrollment or a sync', async () => {
    const enrollment = { consumerId: 'c-race', extraConsents: [], removedConsents: [] } as const;
    // The sync's request went out (01:00) before the enrollment finished (01:01).
    await store.recordEnrollment({
      ...enrollment,
      outcome: 'created',
      at: at('2026-03-01T01:01:00Z'),
    });
    await store.markNotEnrolled({ consumerId: 'c-race', at: at('2026-03-01T01:00:00Z') });
    expect((await store.getConsumer('c-race'))?.notEnrolledAt).toBeNull();
    // A successful sync newer than the refused request wins too.
    await store.finishSync({ consumerId: 'c-race', missing: null, at: at('2026-03-02T00:00:00Z') });
    await store.markNotEnrolled({ consumerId: 'c-race', at: at('2026-03-01T12:00:00Z') });
    expect((await store.getConsumer('c-race'))?.notEnrolledAt).toBeNull();
    // A refusal newer than both is recorded.
    await store.markNotEnrolled({ consumerId: 'c-race', at: at('2026-03-03T00:00:00Z') });
    expect((await store.getConsumer('c-race'))?.notEnrolledAt).toEqual(at('2026-03-03T00:00:00Z'));
  });

  it('clears the not-enrolled mark on a later successful sync, back into reconciliation', async () => {
    const listed = async () =>
      (await store.listEnrolledConsumerIds({ after: null, limit: 1000 })).includes('c-rejoin');
    const enrollment = { consumerId: 'c-rejoin', extraConsents: [], removedConsents: [] } as const;
    await store.recordEnrollment({ ...enrollment, outcome: 'created', at: at('2026-04-01') });
    await store.markNotEnrolled({ consumerId: 'c-rejoin', at: at('2026-04-02') });
    expect(await listed()).toBe(false);
    // A sync older than the mark leaves it.
    await store.finishSync({
      consumerId: 'c-rejoin',
      missing: null,
      at: at('2026-04-01T12:00:00Z'),
    });
    expect((await store.getConsumer('c-rejoin'))?.notEnrolledAt).toEqual(at('2026-04-02'));
    await store.finishSync({ consumerId: 'c-rejoin', missing: null, at: at('2026-04-03') });
    expect((await store.getConsumer('c-rejoin'))?.notEnrolledAt).toBeNull();
    expect(await listed()).toBe(true);
  });

  it('marks synced without moving last_synced_at back', async () => {
    await store.finishSync({ consumerId: 'c-sync', missing: null, at: at('2026-02-02') });
    await store.finishSync({ consumerId: 'c-sync', missing: null, at: at('2026-02-01') });
    expect((await store.getConsumer('c-sync'))?.lastSyncedAt).toEqual(at('2026-02-02'));
  });

  it('cuts a runaway error message', async () => {
    await store.recordConsumerError({
      consumerId: 'c-long',
      message: 'x'.repeat(10_000),
      at: new Date(),
    });
    expect((await store.getConsumer('c-long'))?.lastError).toHaveLength(2000);
  });

  it('returns undefined for an unknown consumer', async () => {
    expect(await store.getConsumer('nobody')).toBeUndefined();
  });
});

describe('listEnrolledConsumerIds', () => {
  it('pages through consumers by keyset, skipping the not-enrolled ones', async () => {
    const local = await createTestDatabase();
    const s = createStore({ url: local.url, schema: 'perks', poolSize: 2 });
    try {
      // Byte order ("C" collation): upper case before lower case, '-' before digits.
      const enrolled = ['A-1', 'B_2', 'a-0', 'a0', 'b', 'zz'];
      for (const id of enrolled) {
        await s.recordEnrollment({
          consumerId: id,
          outcome: 'created',
          extraConsents: [],
          removedConsents: [],
          at: new Date(),
        });
      }
      // Synced before the worker existed: no enrollment, rows created by its rewards.
      await s.writeRewardPage({
        consumerId: 'legacy',
        rewards: [reward()],
        observedAt: new Date(),
      });
      await s.markNotEnrolled({ consumerId: 'gone', at: new Date() });
      await s.markNotEnrolled({ consumerId: 'b', at: new Date() });

      const query = vi.spyOn(s.pool, 'query');
      const pages: string[][] = [];
      let after: string | null = null;
      for (;;) {
        const page: string[] = await s.listEnrolledConsumerIds({ after, limit: 2 });
        if (page.length === 0) break;
        pages.push(page);
        after = page.at(-1) ?? null;
      }
      const sql = query.mock.calls.map((call) => String(call[0]));
      query.mockRestore();
      expect(pages).toEqual([
        ['A-1', 'B_2'],
        ['a-0', 'a0'],
        ['legacy', 'zz'],
      ]);
      expect(sql.every((text) => !/offset/i.test(text))).toBe(true);
    } finally {
      await s.close();
      await local.drop();
    }
  });

  it('refuses a limit that is not a positive integer', async () => {
    await expect(store.listEnrolledConsumerIds({ after: null, limit: 0 })).rejects.toThrow(
      RangeError,
    );
  });
});

describe('ping', () => {
  it('answers when the database does', async () => {
    await expect(store.ping()).resolves.toBeUndefined();
  });
});
