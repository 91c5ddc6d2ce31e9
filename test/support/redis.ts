import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { inject } from 'vitest';
import { deletePrefix } from '../../src/queues/connection.js';

export async function pingRedis(url: string): Promise<void> {
  const redis = new Redis(url, {
    lazyConnect: true,
    maxRetriesPerRequest: 1,
    connectTimeout: 3000,
  });
  try {
    await redis.connect();
    await redis.ping();
  } finally {
    redis.disconnect();
  }
}

/**
 * A queue prefix of its own for one test file, so files run in parallel on one Redis.
 * Call `cleanup()` in afterAll: it deletes every key under the prefix.
 */
export function testQueuePrefix(): {
  redisUrl: string;
  prefix: string;
  cleanup: () => Promise<void>;
} {
  const redisUrl = inject('redisUrl');
  const prefix = `test_${randomBytes(5).toString('hex')}`;
  return {
    redisUrl,
    prefix,
    cleanup: async () => {
      const redis = new Redis(redisUrl, { maxRetriesPerRequest: 1 });
      try {
        await deletePrefix(redis, prefix);
      } finally {
        redis.disconnect();
      }
    },
  };
}
