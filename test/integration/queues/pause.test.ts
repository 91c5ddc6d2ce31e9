/** The API queues' pause (a 429, a failing mint) only ever grows: a short one never cuts a long one. */
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { pauseApiQueues } from '../../../src/jobs/failures.js';
import { closeQueues, defaultJobPolicy, openQueues } from '../../../src/queues/queues.js';
import { testQueuePrefix } from '../../support/redis.js';

const target = testQueuePrefix();
const connection = new Redis(target.redisUrl, { maxRetriesPerRequest: null });
const queues = openQueues(connection, target.prefix, defaultJobPolicy);

afterAll(async () => {
  await closeQueues(queues);
  connection.disconnect();
  await target.cleanup();
});

describe('pauseApiQueues', () => {
  it('pauses both API queues, and a shorter pause leaves a longer one as it is', async () => {
    await pauseApiQueues(queues, 30_000);
    await pauseApiQueues(queues, 1000);
    for (const queue of [queues.enrollment, queues.rewardSync]) {
      expect(await queue.getRateLimitTtl()).toBeGreaterThan(25_000);
    }
    expect(await queues.reconciliation.getRateLimitTtl()).toBeLessThanOrEqual(0);
    await pauseApiQueues(queues, 60_000);
    expect(await queues.enrollment.getRateLimitTtl()).toBeGreaterThan(55_000);
  });
});
