import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import type { CachedToken, TokenCache } from '../../src/perks/tokens.js';
import { credentialsName, RedisTokenCache } from '../../src/redis/token-cache.js';
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
const connections: Redis[] = [];
const apis: Array<ReturnType<typeof fakeApi>> = [];

function connect(): Redis {
  const redis = new Redis(redisUrl, { maxRetriesPerRequest: 1 });
  connections.push(redis);
  return redis;
}

let name = 0;
afterEach(async () => {
  await Promise.all(apis.splice(0).map((api) => api.close()));
});
afterAll(async () => {
  for (const redis of connections) redis.disconnect();
  await cleanup();
});

/** N replicas (own client, own Redis connection) sharing one token key; mints are counted. */
function replicas(count: number, mintDelayMs = 0) {
  /** Bearer values the fake API answers 401 to (a revoked token). */
  const revoked = new Set<string>();
  const cacheName = `client_${++name}`;
  const mints: string[] = [];
  const make = () => {
    const api = fakeApi({
      api: (req) =>
        revoked.has(req.headers.authorization ?? '')
          ? { status: 401, body: '' }
          : { status: 200, body: wireReward({ id: REWARD_ID }) },
      prepend: (pool) => {
        const interceptor = pool
          .intercept({ path: `${BASE_PATH}/tokens`, method: 'POST' })
          .reply(() => {
            const token = fakeToken(mints.length + 1);
            mints.push(token);
            return {
              statusCode: 200,
              data: JSON.stringify({ access_token: token, token_type: 'Bearer', expires_in: 3600 }),
              responseOptions: { headers: { 'content-type': 'application/json' } },
            };
          });
        if (mintDelayMs > 0) interceptor.delay(mintDelayMs);
        interceptor.persist();
      },
      client: { tokenCache: new RedisTokenCache({ redis: connect(), prefix, name: cacheName }) },
    });
    apis.push(api);
    return api;
  };
  return { clients: Array.from({ length: count }, make), mints, cacheName, revoked };
}

describe('credentialsName', () => {
  it('keys the shared token by client id, base URL and secret, without showing the secret', () => {
    const right = { baseUrl: 'https://api.example', clientId: 'c1', clientSecret: 'sk_right' };
    const name = credentialsName(right);
    expect(name).toMatch(/^c1:[0-9a-f]{16}$/);
    expect(credentialsName({ ...right })).toBe(name);
    expect(credentialsName({ ...right, clientSecret: 'sk_wrong' })).not.toBe(name);
    expect(credentialsName({ ...right, baseUrl: 'https://sandbox.example' })).not.toBe(name);
  });
});

describe('RedisTokenCache', () => {
  it('two clients sharing the cache mint one token', async () => {
    const { clients, mints } = replicas(2);
    const [a, b] = clients;
    await a?.client.getReward(CONSUMER, REWARD_ID);
    await b?.client.getReward(CONSUMER, REWARD_ID);
    expect(mints).toHaveLength(1);
    expect(b?.apiRequests()[0]?.headers.authorization).toBe(`Bearer ${mints[0]}`);
  });

  it('the lock keeps a herd of concurrent replicas to one mint', async () => {
    const { clients, mints } = replicas(8, 100);
    await Promise.all(
      clients.flatMap((api) =>
        Array.from({ length: 5 }, () => api.client.getReward(CONSUMER, REWARD_ID)),
      ),
    );
    expect(mints).toHaveLength(1);
    const bearers = new Set(
      clients.flatMap((api) => api.apiRequests().map((r) => r.headers.authorization)),
    );
    expect(bearers).toEqual(new Set([`Bearer ${mints[0]}`]));
  });

  it('stores the token with a PX expiry under the prefix', async () => {
    const { clients, cacheName } = replicas(1);
    await clients[0]?.client.getReward(CONSUMER, REWARD_ID);
    const redis = connect();
    const key = `${prefix}:perks:token:${cacheName}`;
    const ttl = await redis.pttl(key);
    expect(ttl).toBeGreaterThan(3_500_000);
    expect(ttl).toBeLessThanOrEqual(3_600_000);
    expect(await redis.exists(`${key}:lock`)).toBe(0);
  });

  it('invalidate drops only the token it names', async () => {
    const cache = new RedisTokenCache({ redis: connect(), prefix, name: 'cas' });
    const now = Date.now();
    await cache.set(
      { accessToken: 'token-new', expiresAt: now + 60_000, refreshAt: now + 50_000 },
      now,
    );
    await cache.invalidate('token-old');
    expect((await cache.get())?.accessToken).toBe('token-new');
    await cache.invalidate('token-new');
    expect(await cache.get()).toBeUndefined();
  });

  it('the lock is exclusive until released', async () => {
    const cache = new RedisTokenCache({ redis: connect(), prefix, name: 'lock' });
    const held = await cache.lock(5_000);
    expect(held).toBeDefined();
    expect(await cache.lock(5_000)).toBeUndefined();
    await held?.release();
    const again = await cache.lock(5_000);
    expect(again).toBeDefined();
    await again?.release();
  });

  it('a 401 makes one replica re-mint once; the others pick the new token from Redis', async () => {
    const { clients, mints, revoked } = replicas(3);
    const [a, b, c] = clients;
    await a?.client.getReward(CONSUMER, REWARD_ID);
    await b?.client.getReward(CONSUMER, REWARD_ID);
    revoked.add(`Bearer ${mints[0]}`);
    await b?.client.getReward(CONSUMER, REWARD_ID); // 401, re-mint, retry
    expect(mints).toHaveLength(2);
    // c never held the old token in memory: it reads the new one from Redis.
    await c?.client.getReward(CONSUMER, REWARD_ID);
    expect(c?.apiRequests()[0]?.headers.authorization).toBe(`Bearer ${mints[1]}`);
    // a still holds the revoked one: its 401 finds the new token in Redis, no third mint.
    await a?.client.getReward(CONSUMER, REWARD_ID);
    expect(mints).toHaveLength(2);
    expect(a?.apiRequests().at(-1)?.headers.authorization).toBe(`Bearer ${mints[1]}`);
  });
});

/**
 * A 401 whose retry joins a lookup that read the refused token before the 401's invalidate,
 * while another replica holds the mint lock (the refresh window).
 */
it('a 401 retry never reuses the refused token: it takes the one another replica stored', async () => {
  const t0 = Date.parse('2024-05-01T10:00:00Z');
  const now = t0 + 3_550_000; // in T1's refresh window (last 60 s of 3600 s)
  const [t1, t2] = [fakeToken(1), fakeToken(2)];
  const cacheName = `race_${++name}`;
  const key = `${prefix}:perks:token:${cacheName}`;
  const redis = connect();
  const real = new RedisTokenCache({ redis, prefix, name: cacheName });
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
