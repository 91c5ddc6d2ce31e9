/** acquireRedisLock against a real Redis: one holder, and only the holder releases. */
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { acquireRedisLock } from '../../src/redis/lock.js';
import { testQueuePrefix } from '../support/redis.js';

const { redisUrl, prefix, cleanup } = testQueuePrefix();
const redis = new Redis(redisUrl, { maxRetriesPerRequest: 1 });
afterAll(async () => {
  redis.disconnect();
  await cleanup();
});

describe('acquireRedisLock', () => {
  it('has one holder at a time, and is free again once released', async () => {
    const key = `${prefix}:lock:one`;
    const first = await acquireRedisLock(redis, key, 10_000);
    expect(first).toBeDefined();
    expect(await acquireRedisLock(redis, key, 10_000)).toBeUndefined();
    await first?.release();
    expect(await acquireRedisLock(redis, key, 10_000)).toBeDefined();
  });

  it('a holder that outlived its expiry does not release the next holder', async () => {
    const key = `${prefix}:lock:expired`;
    const late = await acquireRedisLock(redis, key, 50);
    await new Promise((resolve) => setTimeout(resolve, 120));
    const next = await acquireRedisLock(redis, key, 10_000);
    expect(next).toBeDefined();
    await late?.release();
    expect(await acquireRedisLock(redis, key, 10_000)).toBeUndefined();
  });
});
