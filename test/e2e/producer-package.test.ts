/** The producer API as the client's services import it: `perks-worker/producer`. */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { testQueuePrefix } from '../support/redis.js';

const root = fileURLToPath(new URL('../../', import.meta.url));

const queues = testQueuePrefix();
afterAll(() => queues.cleanup());

describe('perks-worker/producer', () => {
  it('is importable by package name and enqueues a validated enrollment', () => {
    const { prefix } = queues;
    const script = `
      import { createProducer } from 'perks-worker/producer';
      const perks = await createProducer({ redisUrl: process.env.REDIS_URL, queuePrefix: '${prefix}' });
      const first = await perks.enqueueEnrollment({ userId: 'customer-1', extraConsents: ['TARGETING'] });
      const again = await perks.enqueueEnrollment({ userId: 'customer-1' });
      let refused = '';
      try { await perks.enqueueEnrollment({ userId: 42 }); } catch (e) { refused = e.message; }
      await perks.close();
      console.log(JSON.stringify({ first, again, refused }));
    `;
    const result = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
      cwd: root,
      env: { PATH: process.env.PATH ?? '', REDIS_URL: queues.redisUrl },
      encoding: 'utf8',
      timeout: 20_000,
    });
    expect(result.stderr).toBe('');
    const { first, again, refused } = JSON.parse(result.stdout);
    expect(first).toEqual({
      consumerId: 'customer-1',
      jobId: expect.stringMatching(/^enroll-customer-1-[0-9a-z]+$/),
      alreadyPending: false,
    });
    // The duplicate signup event is answered with the pending job, not a second one.
    expect(again).toEqual({ consumerId: 'customer-1', jobId: first.jobId, alreadyPending: true });
    expect(refused).toBe('invalid enrollment payload: userId: must be a string');
  });
});
