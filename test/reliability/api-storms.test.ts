/**
 * API storms: runs of 500s, gateway 502 HTML pages, 503/504 without an envelope, text/plain
 * 429s with Retry-After, connection resets, answers slower than the timeout, and POSTs that
 * time out after the enrollment was applied. The in-process worker rides them out: retries
 * inside the client, then job retries, and the datastore ends equal to the sandbox.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { enqueueEnrollment, enqueueRewardSync } from '../../src/queues/producer.js';
import { expectConsistent } from '../support/processes.js';
import { consumerRequests, type Harness, startHarness } from '../support/worker-harness.js';

let harness: Harness | undefined;
afterEach(async () => {
  await harness?.close();
  harness = undefined;
});

function statusesSeen(h: Harness, route: RegExp): Set<number> {
  return new Set(
    consumerRequests(h.sandbox)
      .filter((e) => route.test(e.path))
      .map((e) => e.status),
  );
}

describe('API storms', () => {
  it('a reward sync rides out 500 runs, 502 HTML, empty 503/504, text 429s, resets and slow answers', async () => {
    harness = await startHarness({
      sandbox: { seed: 31, latencyMs: 20 },
      env: {
        PERKS_TIMEOUT_MS: '800',
        PERKS_RETRY_ATTEMPTS: '3',
        PERKS_RETRY_MAX_MS: '3000',
        JOB_ATTEMPTS: '12',
        JOB_BACKOFF_MS: '100',
      },
    });
    const h = harness;
    const ids = ['storm_a', 'storm_b', 'storm_c'];
    for (const id of ids) h.sandbox.state.addConsumer(id, { rewards: 2100 });
    const inject = h.sandbox.faults.inject.bind(h.sandbox.faults);
    // A run of 500s longer than the client's 3 attempts: the job attempt fails, BullMQ retries.
    inject({ route: 'listRewards', count: 5, kind: 'status', status: 500 });
    inject({ route: 'listRewards', count: 2, kind: 'html502' });
    inject({ route: 'listRewards', count: 1, kind: 'empty', status: 503 });
    inject({ route: 'listRewards', count: 1, kind: 'empty', status: 504 });
    inject({ route: 'listRewards', count: 1, kind: 'status', status: 502 });
    inject({ route: 'listRewards', count: 1, kind: 'throttle429', retryAfterSeconds: 1 });
    inject({ route: 'listRewards', count: 2, kind: 'reset' });
    // Slower than the 800 ms timeout: the client gives up and asks again.
    inject({ route: 'listRewards', count: 1, kind: 'delay', delayMs: 1500 });
    inject({ route: 'listRewards', count: 1, kind: 'throttle429', retryAfterSeconds: 2 });

    for (const consumerId of ids) await enqueueRewardSync(h.runtime.ctx.queues, { consumerId });
    await h.idle(60_000);

    expect(h.sandbox.faults.list()).toEqual([]); // every fault fired
    expect(statusesSeen(h, /\/rewards/)).toEqual(new Set([200, 500, 502, 503, 504, 429, 0]));
    await expectConsistent(h.runtime.ctx.store.pool, h.sandbox, ids);
    expect(await h.runtime.ctx.queues.rewardSync.getFailedCount()).toBe(0);
  }, 90_000);

  it('enrollment storms, and POSTs that time out after being applied, enroll each consumer once upstream', async () => {
    harness = await startHarness({
      sandbox: { seed: 32 },
      env: {
        PERKS_TIMEOUT_MS: '800',
        PERKS_RETRY_ATTEMPTS: '3',
        PERKS_RETRY_MAX_MS: '3000',
        JOB_ATTEMPTS: '12',
        JOB_BACKOFF_MS: '100',
      },
    });
    const h = harness;
    const ids = Array.from({ length: 6 }, (_, i) => `enr_storm_${i}`);
    for (const id of ids) h.sandbox.state.addConsumer(id, { enrolled: false, rewards: 4 });
    const inject = h.sandbox.faults.inject.bind(h.sandbox.faults);
    inject({ route: 'enroll', count: 4, kind: 'status', status: 500 });
    inject({ route: 'enroll', count: 1, kind: 'html502' });
    inject({ route: 'enroll', count: 1, kind: 'empty', status: 503 });
    inject({ route: 'enroll', count: 1, kind: 'reset' });
    inject({ route: 'enroll', count: 1, kind: 'throttle429', retryAfterSeconds: 1 });
    // Applied upstream, answered after the timeout: the retry meets a 409.
    for (const consumerId of [ids[0], ids[1]])
      inject({ route: 'enroll', consumerId, count: 1, kind: 'delay', delayMs: 1500 });
    // Not applied; a gateway 504 after the timeout.
    inject({
      route: 'enroll',
      consumerId: ids[2],
      count: 1,
      kind: 'delay',
      delayMs: 1200,
      applyWrite: false,
    });

    for (const consumerId of ids)
      await enqueueEnrollment(h.runtime.ctx.queues, { consumerId }, undefined);
    await h.idle(60_000);

    expect(h.sandbox.faults.list()).toEqual([]);
    const counters = h.sandbox.state.counters();
    expect(counters.enrollmentsCreated).toBe(ids.length); // once each, never twice
    for (const id of ids) {
      expect(h.sandbox.state.isEnrolled(id)).toBe(true);
      const row = await h.runtime.ctx.store.getConsumer(id);
      expect(['created', 'already_enrolled']).toContain(row?.enrollmentOutcome);
    }
    expect((await h.runtime.ctx.store.getConsumer(ids[0] ?? ''))?.enrollmentOutcome).toBe(
      'already_enrolled',
    );
    await expectConsistent(h.runtime.ctx.store.pool, h.sandbox, ids);
    expect(await h.runtime.ctx.queues.enrollment.getFailedCount()).toBe(0);
  }, 90_000);
});
