/**
 * A replica's close (what SIGTERM runs): the job workers stop taking jobs at once, not after the
 * intake and the webhook delivery have closed.
 */
import { pino } from 'pino';
import { expect, it } from 'vitest';
import { createProducer } from '../../src/queues/producer.js';
import { sleep } from '../support/processes.js';
import { startWebhookReceiver } from '../support/webhook-receiver.js';
import { startHarness } from '../support/worker-harness.js';

it('takes no new job once closing, while a slow webhook delivery still closes', async () => {
  const receiver = await startWebhookReceiver();
  const h = await startHarness({
    env: {
      WEBHOOK_URL: receiver.url,
      WEBHOOK_SECRET: receiver.secret,
      SHUTDOWN_TIMEOUT_MS: '2000',
    },
  });
  const producer = await createProducer({ redisUrl: h.config.redis.url, queuePrefix: h.prefix });
  try {
    h.sandbox.state.addConsumer('slow_hooks', { rewards: 60 });
    receiver.slow = { consumerId: 'slow_hooks', ms: 500 };
    await producer.enqueueRewardSync({ consumerId: 'slow_hooks' });
    for (let i = 0; i < 200 && receiver.accepted.length < 2; i++) await sleep(100);
    const closing = h.app.close();
    await sleep(1000);
    h.sandbox.state.addConsumer('late_signup', { enrolled: false, rewards: 3 });
    const late = await producer.enqueueEnrollment({ consumerId: 'late_signup' });
    await closing;
    // Left for another replica, not started by one that is stopping.
    expect(await producer.queues.enrollment.getJobState(late.jobId)).toBe('waiting');
  } finally {
    await producer.close();
    await h.close();
    await receiver.close();
  }
}, 60_000);

it('cancels a job still running when SHUTDOWN_TIMEOUT_MS ends: it goes back to wait at once, no attempt spent', async () => {
  const lines: string[] = [];
  const logger = pino({ level: 'info' }, { write: (line: string) => lines.push(line) });
  const h = await startHarness({ logger, env: { SHUTDOWN_TIMEOUT_MS: '300' } });
  const producer = await createProducer({ redisUrl: h.config.redis.url, queuePrefix: h.prefix });
  try {
    h.sandbox.state.addConsumer('stuck_sync', { rewards: 3 });
    h.sandbox.state.setLatency(60_000); // the job waits on its first request
    const { jobId } = await producer.enqueueRewardSync({ consumerId: 'stuck_sync' });
    const queue = producer.queues.rewardSync;
    while ((await queue.getJobState(jobId)) !== 'active') await sleep(50);
    const { timedOut } = await h.app.close();
    expect(timedOut).toBe(true); // the grace period ended: its jobs were cancelled
    // Cancelled through its signal: back to wait, not left active for a stall to find.
    expect(await queue.getJobState(jobId)).toBe('waiting');
    expect((await queue.getJob(jobId))?.attemptsMade).toBe(0);
    const messages = lines.map((line) => (JSON.parse(line) as { msg: string }).msg);
    expect(messages).toContain('job paused (worker shutting down); back to waiting');
    const scraped = await h.runtime.metrics.scrape();
    expect(scraped).toMatch(
      /perks_worker_jobs_retried_total\{queue="reward-sync",reason="shutdown"\} 1/,
    );
  } finally {
    await producer.close();
    await h.close();
  }
}, 60_000);
