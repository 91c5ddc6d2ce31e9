/** The producer's reward sync against the real Redis: one job per consumer at a time, and told. */
import { Worker } from 'bullmq';
import { afterAll, expect, it } from 'vitest';
import { queueNames } from '../../../src/queues/names.js';
import { createProducer } from '../../../src/queues/producer.js';
import { connected, createRedisConnection } from '../../../src/redis/connection.js';
import { testQueuePrefix } from '../../support/redis.js';

const { redisUrl, prefix, cleanup } = testQueuePrefix();
const producer = await createProducer({ redisUrl, queuePrefix: prefix });
afterAll(async () => {
  await producer.close();
  await cleanup();
});

it('of calls racing for one consumer, one adds the job and the others say it was pending', async () => {
  const answers = await Promise.all(
    [1, 2, 3].map(() => producer.enqueueRewardSync({ consumerId: 'c_racing' })),
  );
  expect(answers.filter((a) => !a.alreadyPending)).toHaveLength(1);
  expect(new Set(answers.map((a) => a.jobId)).size).toBe(1);
});

it('while its sync runs, another is not added but follows it', async () => {
  const connection = createRedisConnection({ url: redisUrl }, 'worker');
  await connected(connection);
  let release = () => {};
  const held = new Promise<void>((resolve) => {
    release = resolve;
  });
  const runs: string[] = [];
  const worker = new Worker(
    queueNames.rewardSync,
    async (job) => {
      if (job.data.consumerId !== 'c_running') return;
      runs.push(job.id ?? '');
      if (runs.length === 1) await held;
    },
    { connection, prefix },
  );
  try {
    const first = await producer.enqueueRewardSync({ consumerId: 'c_running' });
    await expect.poll(() => runs.length).toBe(1);
    const again = await producer.enqueueRewardSync({ consumerId: 'c_running' });
    expect(again).toEqual({ jobId: first.jobId, alreadyPending: true });
    release();
    await expect.poll(() => runs.length, { timeout: 10_000 }).toBe(2);
  } finally {
    release();
    await worker.close();
    connection.disconnect();
  }
});
