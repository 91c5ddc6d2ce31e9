/**
 * The reconciliation cron as `work` registers it at start: once, again only when the pattern
 * changes, and removed with PERKS_RECONCILE_CRON=off.
 */
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { registerReconcileSchedule } from '../../src/jobs/schedule.js';
import { reconcileSchedulerId } from '../../src/queues/names.js';
import { closeQueues, defaultJobPolicy, openQueues } from '../../src/queues/queues.js';
import { createRedisConnection } from '../../src/redis/connection.js';
import { testQueuePrefix } from '../support/redis.js';

const logger = pino({ level: 'silent' });
const redisTarget = testQueuePrefix();
const redis = createRedisConnection({ url: redisTarget.redisUrl }, 'worker', logger);
const queues = openQueues(redis, redisTarget.prefix, defaultJobPolicy, logger);

afterAll(async () => {
  await closeQueues(queues);
  redis.disconnect();
  await redisTarget.cleanup();
});

describe('registerReconcileSchedule', () => {
  it('registers, leaves an unchanged pattern alone, and removes it when off', async () => {
    const register = (cron: string) =>
      registerReconcileSchedule(queues, redis, redisTarget.prefix, cron, logger);
    expect(await register('0 3 * * *')).toBe('registered');
    expect(await register('0 3 * * *')).toBe('unchanged');
    expect(await register('30 2 * * *')).toBe('registered');
    const scheduler = await queues.reconciliation.getJobScheduler(reconcileSchedulerId);
    expect(scheduler).toMatchObject({ pattern: '30 2 * * *', tz: 'UTC' });
    expect(await register('off')).toBe('removed');
    expect(await queues.reconciliation.getJobScheduler(reconcileSchedulerId)).toBeFalsy();
    expect(await register('off')).toBe('unchanged');
  });

  it('a replica that died holding the lock delays a new pattern, and never drops it', async () => {
    const register = (cron: string) =>
      registerReconcileSchedule(queues, redis, redisTarget.prefix, cron, logger);
    expect(await register('0 4 * * *')).toBe('registered');
    // Taken by a replica killed before it registered; its lock expires by itself.
    await redis.set(`${redisTarget.prefix}:reconciliation:schedule-lock`, 'dead', 'PX', 1000);
    expect(await register('*/15 * * * *')).toBe('registered');
    const scheduler = await queues.reconciliation.getJobScheduler(reconcileSchedulerId);
    expect(scheduler).toMatchObject({ pattern: '*/15 * * * *', tz: 'UTC' });
  });

  it('a replica closing while another holds the lock stops waiting, and says nothing of it', async () => {
    const lines: string[] = [];
    const captured = pino({ level: 'info' }, { write: (line: string) => void lines.push(line) });
    const lockKey = `${redisTarget.prefix}:reconciliation:schedule-lock`;
    await redis.set(lockKey, 'alive', 'PX', 30_000); // a slow replica, alive
    const closing = new AbortController();
    const waiting = registerReconcileSchedule(
      queues,
      redis,
      redisTarget.prefix,
      '0 5 * * *',
      captured,
      closing.signal,
    );
    await new Promise((resolve) => setTimeout(resolve, 500));
    closing.abort();
    // Within the test's 5 s, not the 20 s its wait would last.
    expect(await waiting).toBe('skipped');
    expect(lines).toEqual([]);
    await redis.del(lockKey);
  });
});
