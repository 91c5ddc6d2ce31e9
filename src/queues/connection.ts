import { Redis, type RedisOptions } from 'ioredis';
import type { Logger } from '../ops/logger.js';

/**
 * - `worker`: blocking commands and retries forever while Redis is away (BullMQ requires
 *   `maxRetriesPerRequest: null`); jobs pause and resume when Redis comes back.
 * - `producer`: fails fast, so an API handler enqueueing a signup learns at once that Redis
 *   is down instead of hanging.
 */
export type ConnectionRole = 'worker' | 'producer';

export function createRedisConnection(
  url: string,
  role: ConnectionRole,
  logger?: Logger,
  overrides: RedisOptions = {},
): Redis {
  const options: RedisOptions =
    role === 'worker'
      ? { maxRetriesPerRequest: null, enableReadyCheck: true }
      : { maxRetriesPerRequest: 1, enableOfflineQueue: false, connectTimeout: 5000 };
  const redis = new Redis(url, {
    ...options,
    // Reconnect with a capped backoff instead of ioredis' unbounded growth.
    retryStrategy: (times) => Math.min(times * 200, 5000),
    ...overrides,
  });
  watchErrors(redis, role, logger);
  return redis;
}

/**
 * An unhandled 'error' event would crash the process. Log the first error of an outage and
 * the recovery, not every reconnect attempt.
 */
function watchErrors(redis: Redis, role: ConnectionRole, logger?: Logger): void {
  let down = false;
  redis.on('error', (error: Error) => {
    if (down) return;
    down = true;
    logger?.warn({ err: { message: error.message }, role }, 'redis connection lost; retrying');
  });
  redis.on('ready', () => {
    if (!down) return;
    down = false;
    logger?.info({ role }, 'redis connection restored');
  });
}

/** Resolves when the connection is ready; rejects after `timeoutMs` (producers fail fast). */
export async function connected(redis: Redis, timeoutMs = 5000): Promise<void> {
  if (redis.status === 'ready') return;
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      cleanup();
      reject(new Error(`redis did not answer within ${timeoutMs} ms`));
    }, timeoutMs);
    const onReady = () => {
      cleanup();
      resolve();
    };
    const cleanup = () => {
      clearTimeout(timer);
      redis.off('ready', onReady);
    };
    redis.on('ready', onReady);
  });
}
