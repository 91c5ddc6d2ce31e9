/**
 * Assembles what a worker process runs on: the API client, the store, the Redis connection
 * and the queues. `work` and `demo` both start from here; closing releases all of it.
 */
import type { Redis } from 'ioredis';
import type { Config } from '../config.js';
import type { Logger } from '../ops/logger.js';
import { PerksClient } from '../perks/client.js';
import { createRedisConnection } from '../queues/connection.js';
import { closeQueues, openQueues } from '../queues/queues.js';
import { RedisTokenCache } from '../queues/token-cache.js';
import { createStore } from '../store/store.js';
import type { JobContext } from './context.js';

export interface Runtime {
  ctx: JobContext;
  connection: Redis;
  close(): Promise<void>;
}

export type RuntimeConfig = Pick<Config, 'perks' | 'consumerIds' | 'redis' | 'database' | 'worker'>;

export function createRuntime(config: RuntimeConfig, logger: Logger): Runtime {
  const connection = createRedisConnection(config.redis.url, 'worker', logger);
  const store = createStore(config.database);
  const queues = openQueues(connection, config.redis.queuePrefix, config.worker);
  const client = new PerksClient({
    baseUrl: config.perks.baseUrl,
    clientId: config.perks.clientId,
    clientSecret: config.perks.clientSecret,
    apiVersion: config.perks.apiVersion,
    timeoutMs: config.perks.timeoutMs,
    connections: config.perks.connections,
    retry: { attempts: config.perks.retryAttempts, maxRetryTimeMs: config.perks.retryMaxMs },
    // One token an hour for all replicas, not one per replica.
    tokenCache: new RedisTokenCache({
      redis: connection,
      prefix: config.redis.queuePrefix,
      name: config.perks.clientId,
    }),
    logger,
  });
  const ctx: JobContext = {
    client,
    store,
    queues,
    logger,
    consumerIdKey: config.consumerIds.key,
    reconcile: {
      batchSize: config.worker.reconcileBatchSize,
      maxPending: config.worker.reconcileMaxPending,
    },
  };
  return {
    ctx,
    connection,
    async close() {
      await closeQueues(queues);
      await client.close();
      await store.close();
      connection.disconnect();
    },
  };
}
