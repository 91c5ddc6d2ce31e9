/**
 * A short Redis lock: `SET NX PX` with a random owner, released only by its owner (a holder
 * that outlived the expiry must not delete the lock another process has taken since).
 */
import { randomUUID } from 'node:crypto';
import type { RedisClient } from './connection.js';

const deleteIfValueIs = `
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`;

/** The lock, or undefined when another holder has it. */
export async function acquireRedisLock(
  redis: RedisClient,
  key: string,
  ttlMs: number,
): Promise<{ release(): Promise<void> } | undefined> {
  const owner = randomUUID();
  const acquired = await redis.set(key, owner, 'PX', Math.max(1, Math.ceil(ttlMs)), 'NX');
  if (acquired !== 'OK') return undefined;
  return { release: () => redis.eval(deleteIfValueIs, 1, key, owner).then(() => undefined) };
}
