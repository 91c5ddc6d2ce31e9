/**
 * What became of each consumer a reconciliation fanned out, counted in one Redis hash per
 * reconciliation (`<prefix>:<reconciliation queue>:tally:<job id>`): a few counters, never the
 * consumer ids, so a million consumers cost the same few bytes.
 *
 * - `expected`: consumers to reconcile, counted when it starts (progress before the fan-out ends);
 * - `total`: consumers it enqueued, set when the fan-out ends;
 * - `synced`, `notEnrolled`, `failed`: outcomes, each counted once a consumer's sync ended for
 *   good (a failure that will be retried is not one);
 * - `finishedAt`: set by whichever write makes the outcomes reach `total`.
 *
 * Counting is at least once: a replica killed between a consumer's outcome and its job's
 * completion counts it again on the retry, so figures may run over `total` by that much.
 */
import type { RedisClient } from './connection.js';
import { queueNames } from './names.js';

export type TallyOutcome = 'synced' | 'notEnrolled' | 'failed';

export interface Tally {
  expected?: number;
  total?: number;
  synced: number;
  notEnrolled: number;
  failed: number;
  finishedAt?: string;
}

/** Kept for a month: `status` shows the last reconciliation, whatever the job retention. */
const ttlSeconds = 30 * 24 * 3600;

// KEYS[1]: the tally. ARGV: field to increment ('' for none), by, field to set ('' for none),
// its value, now (ISO), ttl. One script, so the completion check sees its own write.
const script = `
if ARGV[1] ~= '' then redis.call('HINCRBY', KEYS[1], ARGV[1], ARGV[2]) end
if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], ARGV[3], ARGV[4]) end
redis.call('EXPIRE', KEYS[1], ARGV[6])
local v = redis.call('HMGET', KEYS[1], 'total', 'synced', 'notEnrolled', 'failed', 'finishedAt')
if v[1] and not v[5] then
  local ended = (tonumber(v[2]) or 0) + (tonumber(v[3]) or 0) + (tonumber(v[4]) or 0)
  if ended >= tonumber(v[1]) then redis.call('HSET', KEYS[1], 'finishedAt', ARGV[5]) end
end
return 1`;

/** Where the tallies are: the worker's Redis and QUEUE_PREFIX. */
export interface TallyStore {
  redis: RedisClient;
  prefix: string;
}

/** Beside the reconciliation queue's keys (the same hash slot in a Redis Cluster). */
const keyOf = ({ prefix }: TallyStore, reconciliationId: string) =>
  `${prefix}:${queueNames.reconciliation}:tally:${reconciliationId}`;

async function write(
  store: TallyStore,
  reconciliationId: string,
  increment: [TallyOutcome, number] | undefined,
  set: ['expected' | 'total', number] | undefined,
): Promise<void> {
  await store.redis.eval(
    script,
    1,
    keyOf(store, reconciliationId),
    increment?.[0] ?? '',
    increment?.[1] ?? 0,
    set?.[0] ?? '',
    set?.[1] ?? 0,
    new Date().toISOString(),
    ttlSeconds,
  );
}

/** `n` consumers of the reconciliation ended with `outcome`. */
export async function countOutcome(
  store: TallyStore,
  reconciliationId: string,
  outcome: TallyOutcome,
  n = 1,
): Promise<void> {
  if (n > 0) await write(store, reconciliationId, [outcome, n], undefined);
}

/** Records `expected` (at the start) or `total` (when the fan-out has ended). */
export async function setTallyFigure(
  store: TallyStore,
  reconciliationId: string,
  figure: 'expected' | 'total',
  value: number,
): Promise<void> {
  await write(store, reconciliationId, undefined, [figure, value]);
}

export async function readTally(store: TallyStore, reconciliationId: string): Promise<Tally> {
  const raw = await store.redis.hgetall(keyOf(store, reconciliationId));
  const number = (field: string) => (raw[field] === undefined ? undefined : Number(raw[field]));
  return {
    ...(raw.expected !== undefined ? { expected: number('expected') } : {}),
    ...(raw.total !== undefined ? { total: number('total') } : {}),
    synced: number('synced') ?? 0,
    notEnrolled: number('notEnrolled') ?? 0,
    failed: number('failed') ?? 0,
    ...(raw.finishedAt ? { finishedAt: raw.finishedAt } : {}),
  };
}
