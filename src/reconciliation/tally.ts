/**
 * A reconciliation's tally (what counts what: index.ts): a Redis hash beside the queue's keys
 * (one hash slot in a Cluster). Counters only, never ids: a million consumers cost a few bytes.
 */

import { queueNames } from '../queues/names.js';
import type { RedisClient } from '../redis/connection.js';

/** Where the tallies are: the worker's Redis and QUEUE_PREFIX. */
export interface TallyStore {
  redis: RedisClient;
  prefix: string;
}

/** Kept for a month: `status` shows the last reconciliation, whatever the job retention. */
const ttlSeconds = 30 * 24 * 3600;

// KEYS[1]: the tally. ARGV: now (ISO), ttl, a field to set ('' for none) and its value, then
// pairs of a field to increment and by how much. One script: the completion check sees every
// write of the call, and a call counts all or nothing.
const script = `
if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], ARGV[3], ARGV[4]) end
for i = 5, #ARGV, 2 do
  if tonumber(ARGV[i + 1]) > 0 then redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1]) end
end
redis.call('EXPIRE', KEYS[1], ARGV[2])
local v = redis.call('HMGET', KEYS[1], 'total', 'synced', 'notEnrolled', 'failed', 'finishedAt')
if v[1] and not v[5] then
  local ended = (tonumber(v[2]) or 0) + (tonumber(v[3]) or 0) + (tonumber(v[4]) or 0)
  if ended >= tonumber(v[1]) then redis.call('HSET', KEYS[1], 'finishedAt', ARGV[1]) end
end
return 1`;

const keyOf = ({ prefix }: TallyStore, reconciliationId: string) =>
  `${prefix}:${queueNames.reconciliation}:tally:${reconciliationId}`;

/** The last reconciliation to start its fan-out, for `status` (the queue holds other jobs). */
const lastKey = ({ prefix }: TallyStore) => `${prefix}:${queueNames.reconciliation}:last-started`;

export async function recordLastReconciliation(store: TallyStore, id: string): Promise<void> {
  await store.redis.set(lastKey(store), id, 'EX', ttlSeconds);
}

export const readLastReconciliation = async (store: TallyStore) =>
  (await store.redis.get(lastKey(store))) ?? undefined;

/** Adds outcomes, or sets `expected` (at the start) or `total` (once fanned out); atomic. */
export async function updateTally(
  store: TallyStore,
  reconciliationId: string,
  outcomes: Partial<Record<'synced' | 'notEnrolled' | 'failed', number>>,
  figure?: ['expected' | 'total', number],
): Promise<void> {
  if (!figure && !Object.values(outcomes).some((n) => (n ?? 0) > 0)) return;
  await store.redis.eval(
    script,
    1,
    keyOf(store, reconciliationId),
    new Date().toISOString(),
    ttlSeconds,
    figure?.[0] ?? '',
    figure?.[1] ?? 0,
    ...Object.entries(outcomes).flat(),
  );
}

export type Tally = Awaited<ReturnType<typeof readTally>>;

export async function readTally(store: TallyStore, reconciliationId: string) {
  const raw = await store.redis.hgetall(keyOf(store, reconciliationId));
  const { expected, total, finishedAt } = raw;
  return {
    ...(expected === undefined ? {} : { expected: Number(expected) }),
    ...(total === undefined ? {} : { total: Number(total) }),
    synced: Number(raw.synced ?? 0),
    notEnrolled: Number(raw.notEnrolled ?? 0),
    failed: Number(raw.failed ?? 0),
    ...(finishedAt ? { finishedAt } : {}),
  };
}
