import { setTimeout } from 'node:timers/promises';
import type { Logger } from '../ops/logger.js';
import { jobNames, pruneSchedulerId, reconcileSchedulerId } from '../queues/names.js';
import type { Queues } from '../queues/queues.js';
import type { RedisClient } from '../redis/connection.js';
import { acquireRedisLock } from '../redis/lock.js';

const scheduleLockMs = 10_000;

/**
 * Registers the reconciliation cron (`off` removes it). Replicas booting together made duplicate
 * schedules: one at a time does it, under a Redis lock, and only when the pattern changed. A
 * replica finding the lock taken waits for it (its holder may have died before applying a new
 * pattern), up to twice its lifetime: then the holder is alive and slow, and it says so.
 * `closing` (the replica's shutdown) ends the wait: the next replica to start checks it.
 */
export async function registerReconcileSchedule(
  queues: Queues,
  redis: RedisClient,
  prefix: string,
  cron: string,
  logger: Logger,
  closing?: AbortSignal,
): Promise<'registered' | 'removed' | 'unchanged' | 'skipped'> {
  const key = `${prefix}:reconciliation:schedule-lock`;
  const giveUpAt = Date.now() + 2 * scheduleLockMs;
  let lock = await acquireRedisLock(redis, key, scheduleLockMs);
  while (!lock && Date.now() < giveUpAt) {
    const waited = await setTimeout(200, true, { signal: closing }).catch(() => false);
    if (!waited) return 'skipped';
    lock = await acquireRedisLock(redis, key, scheduleLockMs);
  }
  if (!lock) {
    logger.warn({ cron }, 'reconciliation schedule not checked: another replica holds its lock');
    return 'skipped';
  }
  try {
    const existing = await queues.reconciliation.getJobScheduler(reconcileSchedulerId);
    if (cron === 'off') {
      if (!existing) return 'unchanged';
      await queues.reconciliation.removeJobScheduler(reconcileSchedulerId);
      logger.info('reconciliation schedule removed (PERKS_RECONCILE_CRON=off)');
      return 'removed';
    }
    if (existing?.pattern === cron && existing.tz === 'UTC') return 'unchanged';
    await queues.reconciliation.upsertJobScheduler(
      reconcileSchedulerId,
      { pattern: cron, tz: 'UTC' },
      { name: jobNames.reconcileTick, data: {}, opts: { attempts: 3 } },
    );
    logger.info({ cron, tz: 'UTC' }, 'reconciliation schedule registered');
    return 'registered';
  } finally {
    await lock.release();
  }
}

const hourMs = 3_600_000;

/**
 * The feed's pruning, once for all replicas: an hourly scheduler (every replica upserts the same
 * one; its next job keeps its id and time) and a run 15 s after start, deduplicated while it is
 * pending or running, so replicas starting together share it and a later restart prunes anew.
 * `off` (undefined) removes the scheduler.
 */
export async function schedulePruning(
  queues: Pick<Queues, 'reconciliation'>,
  retentionDays: number | undefined,
): Promise<void> {
  const queue = queues.reconciliation;
  if (retentionDays === undefined) {
    await queue.removeJobScheduler(pruneSchedulerId);
    return;
  }
  // A new `every` scheduler runs at once: its first run is set an hour away, after ours.
  const startDate = Date.now() + hourMs;
  const job = { name: jobNames.pruneEvents, data: {} };
  await queue.upsertJobScheduler(pruneSchedulerId, { every: hourMs, startDate }, job);
  await queue.add(job.name, job.data, { delay: 15_000, deduplication: { id: pruneSchedulerId } });
}
