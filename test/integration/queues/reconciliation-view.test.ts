/**
 * A reconciliation whose fan-out completed and whose syncs all ended is finished, even when an
 * outcome was never counted; but not while the count of a job that failed a moment ago may still
 * be on its way to the tally (the worker counts it just after the job's move to failed).
 */
import { type Job, UnrecoverableError, Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { reconciliationView } from '../../../src/queues/inspect.js';
import { queueNames } from '../../../src/queues/names.js';
import { closeQueues, defaultJobPolicy, openQueues } from '../../../src/queues/queues.js';
import { updateTally } from '../../../src/reconciliation/tally.js';
import { testQueuePrefix } from '../../support/redis.js';

const target = testQueuePrefix();
const connection = new Redis(target.redisUrl, { maxRetriesPerRequest: null });
const queues = openQueues(connection, target.prefix, defaultJobPolicy);
const tallies = { redis: connection, prefix: target.prefix };

afterAll(async () => {
  await closeQueues(queues);
  connection.disconnect();
  await target.cleanup();
});

/** Runs one job of `queue` through `processor`; resolves once it has completed or failed. */
async function runOne(queue: string, processor: (job: Job) => Promise<unknown>) {
  const worker = new Worker(queue, processor, { connection, prefix: target.prefix });
  await new Promise<void>((resolve) => {
    worker.once('completed', () => resolve());
    worker.once('failed', () => resolve());
  });
  await worker.close();
}

describe('reconciliationView', () => {
  it('is running while a sync of it that just failed may not be counted yet, finished after', async () => {
    const reconcile = await queues.reconciliation.add('reconcile', { trigger: 'manual' });
    const id = reconcile.id ?? '';
    await runOne(queueNames.reconciliation, async () => ({ enqueued: 2 }));
    await updateTally(tallies, id, {}, ['total', 2]);
    await updateTally(tallies, id, { synced: 1 });

    // The other consumer's sync fails for good, and no listener counts it.
    const sync = await queues.rewardSync.add('sync-rewards', {
      consumerId: 'c2',
      reconciliation: id,
    });
    await runOne(queueNames.rewardSync, async () => {
      throw new UnrecoverableError('refused');
    });
    const job = await queues.reconciliation.getJob(id);
    if (!job) throw new Error('the reconciliation job is gone');
    expect(await queues.rewardSync.getJobState(sync.id ?? '')).toBe('failed');
    expect((await reconciliationView(queues, tallies, job)).state).toBe('running');

    // Failed 11 s ago and still not counted: its count is not coming. The failed set is scored
    // by finishedOn, as BullMQ writes both.
    const failedAt = Date.now() - 11_000;
    const key = `${target.prefix}:${queueNames.rewardSync}`;
    await connection.hset(`${key}:${sync.id}`, 'finishedOn', failedAt);
    await connection.zadd(`${key}:failed`, failedAt, sync.id ?? '');

    // Over 1,000 others failed in the last 10 s: the view does not read them all, and waits.
    const others = Array.from({ length: 1001 }, (_, i) => `other-${i}`);
    await connection.zadd(`${key}:failed`, ...others.flatMap((other) => [Date.now(), other]));
    expect((await reconciliationView(queues, tallies, job)).state).toBe('running');
    await connection.zrem(`${key}:failed`, ...others);

    const view = await reconciliationView(queues, tallies, job);
    expect(view).toMatchObject({
      state: 'finished',
      consumers: { total: 2, synced: 1, failed: 0 },
    });
  });
});
