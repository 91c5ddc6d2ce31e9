import { randomBytes } from 'node:crypto';
import { Cluster, Redis } from 'ioredis';
import { inject } from 'vitest';
import { deletePrefix } from '../../src/redis/connection.js';

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
 * Call `cleanup()` in afterAll: it deletes every key under the prefix. On a Redis Cluster
 * (`clusterNodes`) the prefix is hash-tagged, as the worker's config requires there.
 */
export function testQueuePrefix(clusterNodes?: readonly { host: string; port: number }[]): {
  redisUrl: string;
  clusterNodes: readonly { host: string; port: number }[] | undefined;
  prefix: string;
  cleanup: () => Promise<void>;
} {
  const redisUrl = inject('redisUrl');
  const id = randomBytes(5).toString('hex');
  const prefix = clusterNodes ? `{perks_test_${id}}` : `test_${id}`;
  return {
    redisUrl,
    clusterNodes,
    prefix,
    cleanup: async () => {
      const redis = clusterNodes
        ? new Cluster([...clusterNodes])
        : new Redis(redisUrl, { maxRetriesPerRequest: 1 });
      try {
        await deletePrefix(redis, prefix);
      } finally {
        redis.disconnect();
      }
    },
  };
}
