/**
 * The worker end to end: sandbox + processors + real Redis and Postgres. Each test checks the
 * final datastore against the sandbox's own data.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { deriveConsumerId } from '../../src/queues/consumer-id.js';
import { enqueueEnrollment, enqueueRewardSync } from '../../src/queues/producer.js';
import { canonicalAmount } from '../support/processes.js';
import {
  type Harness,
  startHarness,
  testConsumerIdKey,
  upstreamRewardIds,
} from '../support/worker-harness.js';

let harness: Harness | undefined;
afterEach(async () => {
  await harness?.close();
  harness = undefined;
});

async function storedAmounts(h: Harness, consumerId: string): Promise<Map<string, string>> {
  const { rows } = await h.runtime.ctx.store.pool.query<{
    id: string;
    amount: string;
    status: string;
  }>('select id, amount::text as amount, status from perks.rewards where consumer_id = $1', [
    consumerId,
  ]);
  return new Map(rows.map((r) => [r.id, `${r.amount} ${r.status}`]));
}

/** The sandbox's rewards as the datastore should hold them: canonical amount and status. */
function expectedAmounts(h: Harness, consumerId: string): Map<string, string> {
  const items = h.sandbox.state.rewardsOf(consumerId) as {
    id: string;
    amount: string;
    status: string;
  }[];
  return new Map(items.map((r) => [r.id, `${canonicalAmount(r.amount)} ${r.status}`]));
}

describe('enrollment', () => {
  it('enrolls a batch; a POST that times out after being applied ends already_enrolled, one consumer upstream', async () => {
    harness = await startHarness();
    const h = harness;
    const userIds = [
      'alice@example.com',
      'bob@example.com',
      'customer-3',
      'customer-4',
      'eve+perks@example.com',
    ];
    const consumerIds = userIds.map((u) => deriveConsumerId(u, testConsumerIdKey));
    for (const id of consumerIds) h.sandbox.state.addConsumer(id, { enrolled: false, rewards: 3 });
    const slow = consumerIds[0] ?? '';
    // Longer than the client's 1000 ms timeout, and the sandbox still enrolls the consumer.
    h.sandbox.faults.inject({
      route: 'enroll',
      consumerId: slow,
      count: 1,
      kind: 'delay',
      delayMs: 1500,
      applyWrite: true,
    });

    for (const userId of userIds)
      await enqueueEnrollment(h.runtime.ctx.queues, { userId }, testConsumerIdKey);
    // A duplicate signup event while the first is pending adds no second job.
    await enqueueEnrollment(h.runtime.ctx.queues, { userId: userIds[1] ?? '' }, testConsumerIdKey);
    await h.idle();

    const counters = h.sandbox.state.counters();
    expect(counters.enrollmentsCreated).toBe(5);
    expect(counters.enrollmentsConflicted).toBeGreaterThanOrEqual(1);
    const slowRow = await h.runtime.ctx.store.getConsumer(slow);
    expect(slowRow?.enrollmentOutcome).toBe('already_enrolled');
    expect(slowRow?.userId).toBe('alice@example.com');
    for (const id of consumerIds.slice(1)) {
      expect((await h.runtime.ctx.store.getConsumer(id))?.enrollmentOutcome).toBe('created');
      // The first sync follows each enrollment.
      expect(await h.rewardIds(id)).toEqual(upstreamRewardIds(h.sandbox, id));
    }
    expect(await h.rewardIds(slow)).toEqual(upstreamRewardIds(h.sandbox, slow));
  });

  it('deduplicates enrollments while one is pending, atomically, and takes a new one after it finished', async () => {
    harness = await startHarness();
    const h = harness;
    const q = h.runtime.ctx.queues;
    h.sandbox.state.addConsumer('dup_1', { enrolled: false });
    // The first POST is slow, so the job is still running while the others arrive.
    h.sandbox.faults.inject({
      route: 'enroll',
      consumerId: 'dup_1',
      count: 1,
      kind: 'delay',
      delayMs: 600,
    });
    const racing = await Promise.all(
      Array.from({ length: 8 }, () => enqueueEnrollment(q, { consumerId: 'dup_1' }, undefined)),
    );
    expect(racing.filter((r) => !r.alreadyPending)).toHaveLength(1);
    expect(new Set(racing.map((r) => r.jobId)).size).toBe(1);
    await h.idle();

    // Once that job has finished, a new request is a new job (answered 409: already enrolled).
    const after = await enqueueEnrollment(q, { consumerId: 'dup_1' }, undefined);
    expect(after.alreadyPending).toBe(false);
    expect(after.jobId).not.toBe(racing[0]?.jobId);
    await h.idle();
    expect(h.sandbox.state.counters()).toMatchObject({
      enrollmentsCreated: 1,
      enrollmentsConflicted: 1,
    });
    expect(h.sandbox.state.counters().requests.enroll).toBe(2);
  });

  it('fails a malformed payload alone, naming the field, without retries', async () => {
    harness = await startHarness();
    const h = harness;
    const bad = await h.runtime.ctx.queues.enrollment.add('enroll', {
      userId: 42,
      extraConsents: ['BASIC', 'NOPE'],
    });
    const tooLong = await h.runtime.ctx.queues.enrollment.add('enroll', {
      userId: 'x'.repeat(10_000),
    });
    h.sandbox.state.addConsumer('good_one', { enrolled: false });
    await enqueueEnrollment(h.runtime.ctx.queues, { consumerId: 'good_one' }, undefined);
    await h.idle();

    const failed = await h.runtime.ctx.queues.enrollment.getJob(bad.id ?? '');
    expect(failed?.failedReason).toMatch(/userId: must be a string/);
    expect(failed?.failedReason).toMatch(/extraConsents\[1\]/);
    expect(failed?.attemptsMade).toBe(1);
    const failedLong = await h.runtime.ctx.queues.enrollment.getJob(tooLong.id ?? '');
    expect(failedLong?.failedReason).toMatch(/userId: must be at most 256 characters/);
    expect(failedLong?.failedReason?.length).toBeLessThan(300);
    expect((await h.runtime.ctx.store.getConsumer('good_one'))?.enrollmentOutcome).toBe('created');
  });

  it('refuses a user id already recorded for another consumer, before any POST, without retries', async () => {
    harness = await startHarness();
    const h = harness;
    h.sandbox.state.addConsumer('c_alice', { enrolled: false });
    h.sandbox.state.addConsumer('alice', { enrolled: false });
    await enqueueEnrollment(
      h.runtime.ctx.queues,
      { consumerId: 'c_alice', userId: 'alice' },
      undefined,
    );
    await h.idle();
    // The same user, its consumer id now derived another way (as is: a valid consumer id).
    const again = await enqueueEnrollment(h.runtime.ctx.queues, { userId: 'alice' }, undefined);
    await h.idle();
    const failed = await h.runtime.ctx.queues.enrollment.getJob(again.jobId);
    expect(failed?.failedReason).toBe(
      'invalid enrollment payload: userId "alice" is already the user of consumer c_alice, not alice (did the producer\'s consumerId or PERKS_CONSUMER_ID_KEY change?)',
    );
    expect(failed?.attemptsMade).toBe(1);
    expect(h.sandbox.state.isEnrolled('alice')).toBe(false);
    expect((await h.runtime.ctx.store.getConsumer('c_alice'))?.userId).toBe('alice');
  });
});

describe('reward sync', () => {
  it('stores consumers with 0, 1, 1000, 1001 and 2500 rewards exactly', async () => {
    harness = await startHarness();
    const h = harness;
    const sizes = [0, 1, 1000, 1001, 2500];
    for (const n of sizes) h.sandbox.state.addConsumer(`c_${n}`, { rewards: n });
    for (const n of sizes) await enqueueRewardSync(h.runtime.ctx.queues, { consumerId: `c_${n}` });
    await h.idle(60_000);
    for (const n of sizes) {
      const stored = await storedAmounts(h, `c_${n}`);
      expect(stored.size, `c_${n}`).toBe(n);
      expect(stored).toEqual(expectedAmounts(h, `c_${n}`));
      expect((await h.runtime.ctx.store.getConsumer(`c_${n}`))?.lastSyncedAt).toBeInstanceOf(Date);
    }
  });

  it('survives 500s, 502 HTML pages and 429s, and a token expiring mid-sync', async () => {
    harness = await startHarness({ sandbox: { tokenTtlSeconds: 2, latencyMs: 150 } });
    const h = harness;
    h.sandbox.state.addConsumer('stormy', { rewards: 2500 });
    h.sandbox.faults.inject({ route: 'listRewards', count: 2, kind: 'status', status: 500 });
    h.sandbox.faults.inject({ route: 'listRewards', count: 1, kind: 'html502' });
    h.sandbox.faults.inject({
      route: 'listRewards',
      count: 1,
      kind: 'throttle429',
      retryAfterSeconds: 2,
    });
    h.sandbox.faults.inject({ route: 'listRewards', count: 1, kind: 'status', status: 502 });
    await enqueueRewardSync(h.runtime.ctx.queues, { consumerId: 'stormy' });
    // Let the first token expire between pages.
    await new Promise((r) => setTimeout(r, 2500));
    await enqueueRewardSync(h.runtime.ctx.queues, { consumerId: 'stormy' });
    await h.idle(60_000);

    expect(await storedAmounts(h, 'stormy')).toEqual(expectedAmounts(h, 'stormy'));
    expect(h.sandbox.state.counters().tokensMinted).toBeGreaterThanOrEqual(2);
    // Tokens were refreshed ahead of expiry: no call was made with an expired one.
    expect(h.sandbox.state.requestLog().filter((entry) => entry.status === 401)).toEqual([]);
    const failed = await h.runtime.ctx.queues.rewardSync.getFailedCount();
    expect(failed).toBe(0);
  });

  it('pauses both API queues on a 429, even with Retry-After: 0, without spending attempts', async () => {
    harness = await startHarness({ env: { PERKS_RETRY_ATTEMPTS: '1' } });
    const h = harness;
    h.sandbox.state.addConsumer('throttled', { rewards: 3 });
    h.sandbox.faults.inject({
      route: 'listRewards',
      count: 2,
      kind: 'throttle429',
      retryAfterSeconds: 0,
    });
    const job = await enqueueRewardSync(h.runtime.ctx.queues, { consumerId: 'throttled' });
    await h.idle();
    const done = await h.runtime.ctx.queues.rewardSync.getJob(job.id ?? '');
    expect(await done?.getState()).toBe('completed');
    // Two throttled attempts went back to waiting without counting; the third succeeded.
    expect(done?.attemptsMade).toBe(1);
    expect(h.sandbox.state.counters().requests.listRewards).toBe(3);
    expect(await storedAmounts(h, 'throttled')).toEqual(expectedAmounts(h, 'throttled'));
  });

  it('marks a consumer not enrolled on ERR-404-02 and stops without retrying', async () => {
    harness = await startHarness();
    const h = harness;
    h.sandbox.state.addConsumer('ghost_1', { enrolled: false, rewards: 5 });
    await enqueueRewardSync(h.runtime.ctx.queues, { consumerId: 'ghost_1' });
    await h.idle();
    const row = await h.runtime.ctx.store.getConsumer('ghost_1');
    expect(row?.notEnrolledAt).toBeInstanceOf(Date);
    expect(h.sandbox.state.counters().requests.listRewards).toBe(1);
    expect(await h.rewardIds('ghost_1')).toEqual([]);
  });

  it('records status changes, marks removed rewards missing, and re-syncs idempotently', async () => {
    harness = await startHarness();
    const h = harness;
    h.sandbox.state.addConsumer('mover', { rewards: 30 });
    await enqueueRewardSync(h.runtime.ctx.queues, { consumerId: 'mover' });
    await h.idle();
    const items = h.sandbox.state.rewardsOf('mover') as { id: string; status: string }[];
    const target = items.find((r) => r.status === 'VALIDATED') ?? items[0];
    const gone = items.find((r) => r !== target);
    expect(target?.status).toBe('VALIDATED');
    h.sandbox.state.setRewardStatus('mover', target?.id ?? '', 'PAID_OUT');
    h.sandbox.state.removeReward('mover', gone?.id ?? '');
    await enqueueRewardSync(h.runtime.ctx.queues, { consumerId: 'mover' });
    await h.idle();
    await enqueueRewardSync(h.runtime.ctx.queues, { consumerId: 'mover' });
    await h.idle();

    const pool = h.runtime.ctx.store.pool;
    const changes = await pool.query(
      'select * from perks.reward_status_changes where reward_id = $1',
      [target?.id],
    );
    expect(changes.rows).toMatchObject([{ old_status: 'VALIDATED', new_status: 'PAID_OUT' }]);
    const missing = await pool.query<{ id: string }>(
      'select id from perks.rewards where missing_since is not null',
    );
    expect(missing.rows.map((r) => r.id)).toEqual([gone?.id]);
  });
});
