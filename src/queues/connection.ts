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
  let everReady = false;
  redis.on('error', (error: Error) => {
    // A producer that never connected reports that to its caller (see `connected`).
    if (down || (role === 'producer' && !everReady)) return;
    down = true;
    logger?.warn({ err: { message: error.message }, role }, 'redis connection lost; retrying');
  });
  redis.on('ready', () => {
    everReady = true;
    if (!down) return;
    down = false;
    logger?.info({ role }, 'redis connection restored');
  });
}

/**
 * Resolves when the connection is ready. Rejects at the first connection error, or after
 * `timeoutMs`: a producer must fail fast rather than wait for Redis to come back.
 */
export async function connected(redis: Redis, timeoutMs = 5000): Promise<void> {
  if (redis.status === 'ready') return;
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(
      () => settle(new Error(`no answer within ${timeoutMs} ms`)),
      timeoutMs,
    );
    const onReady = () => settle();
    const onError = (error: Error) => settle(error);
    const settle = (error?: Error) => {
      clearTimeout(timer);
      redis.off('ready', onReady);
      redis.off('error', onError);
      if (error) reject(error);
      else resolve();
    };
    redis.on('ready', onReady);
    redis.on('error', onError);
  });
}

/** Deletes every key under `prefix` (`<prefix>:*`), a batch of SCAN at a time. */
export async function deletePrefix(redis: Redis, prefix: string): Promise<void> {
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000);
    if (keys.length > 0) await redis.unlink(...keys);
    cursor = next;
  } while (cursor !== '0');
}
