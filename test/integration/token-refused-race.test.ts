/**
 * A 401 whose retry joins a token lookup that read the refused token before the 401's
 * invalidate, while another replica holds the Redis mint lock (the refresh window): the retry
 * must use the token that replica stored, never the refused one again.
 */
import { Redis } from 'ioredis';
import { afterAll, expect, it } from 'vitest';
import type { CachedToken, TokenCache } from '../../src/perks/tokens.js';
import { RedisTokenCache } from '../../src/redis/token-cache.js';
import { testQueuePrefix } from '../support/redis.js';
import {
  BASE_PATH,
  CONSUMER,
  fakeApi,
  fakeToken,
  REWARD_ID,
  wireReward,
} from '../unit/perks/fake-api.js';

const { redisUrl, prefix, cleanup } = testQueuePrefix();
const redis = new Redis(redisUrl, { maxRetriesPerRequest: 1 });
afterAll(async () => {
  redis.disconnect();
  await cleanup();
});
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

it('a 401 retry never reuses the refused token: it takes the one another replica stored', async () => {
  const t0 = Date.parse('2024-05-01T10:00:00Z');
  const now = t0 + 3_550_000; // in T1's refresh window (last 60 s of 3600 s)
  const [t1, t2] = [fakeToken(1), fakeToken(2)];
  const name = `race_${Date.now()}`;
  const key = `${prefix}:perks:token:${name}`;
  const real = new RedisTokenCache({ redis, prefix, name });
  await real.set({ accessToken: t1, expiresAt: t0 + 3_600_000, refreshAt: t0 + 3_540_000 }, now);
  // Replica A holds the mint lock: it is minting T2.
  await redis.set(`${key}:lock`, 'replica-a', 'PX', 10_000);
  // A Redis 50 ms away (or a busy one): only the lock call is slowed.
  const cache: TokenCache = {
    get: () => real.get(),
    set: (t: CachedToken, n: number) => real.set(t, n),
    invalidate: (t: string) => real.invalidate(t),
    lock: async (ttl: number) => {
      await sleep(50);
      return real.lock(ttl);
    },
  };
  const seen: string[] = [];
  const api = fakeApi({
    tokens: () => ({ status: 500, body: '' }), // never reached: no mint by this replica
    prepend: (pool) =>
      pool
        .intercept({
          path: `${BASE_PATH}/perks/consumers/${CONSUMER}/rewards/${REWARD_ID}`,
          method: 'GET',
        })
        .reply((opts) => {
          const auth = (opts.headers as Record<string, string>).authorization;
          seen.push(auth === `Bearer ${t1}` ? 'T1' : auth === `Bearer ${t2}` ? 'T2' : '?');
          return auth === `Bearer ${t1}`
            ? { statusCode: 401, data: '' } // T1 is refused (revoked / server clock ahead)
            : {
                statusCode: 200,
                data: JSON.stringify(wireReward({ id: REWARD_ID })),
                responseOptions: { headers: { 'content-type': 'application/json' } },
              };
        })
        .delay(40)
        .persist(),
    client: { tokenCache: cache, now: () => now },
  });
  try {
    const r1 = api.client.getReward(CONSUMER, REWARD_ID).then(
      () => 'ok',
      (e: Error) => `${e.name}: ${e.message}`,
    );
    await sleep(60); // R1 has T1 and is waiting for its answer
    const r2 = api.client.getReward(CONSUMER, REWARD_ID).then(
      () => 'ok',
      (e: Error) => `${e.name}: ${e.message}`,
    );
    await sleep(10);
    // Replica A stores T2 before R1's 401 comes back (its lock release follows shortly).
    await real.set(
      { accessToken: t2, expiresAt: now + 3_600_000, refreshAt: now + 3_540_000 },
      now,
    );
    const released = sleep(150).then(() => redis.del(`${key}:lock`));
    const results = await Promise.all([r1, r2]);
    await released;
    // R1 was refused T1; its one retry must use T2, which Redis held by then.
    expect(results).toEqual(['ok', 'ok']);
    expect(seen.at(-1)).toBe('T2');
    expect(api.tokenRequests()).toHaveLength(0);
  } finally {
    await api.close();
  }
});
