/**
 * Bad input is refused cleanly: the error names the field, the worker keeps running, and
 * nothing is written. Job payloads added straight to Redis (as any client could), CLI
 * arguments, the environment, and API bodies that are not JSON, have the wrong shape or are
 * too large.
 */
import { spawnSync } from 'node:child_process';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { jobNames } from '../../src/queues/names.js';
import { enqueueEnrollment, enqueueRewardSync } from '../../src/queues/producer.js';
import type { RewardJson } from '../../src/sandbox/index.js';
import { bin, expectConsistent } from '../support/processes.js';
import { testQueuePrefix } from '../support/redis.js';
import { type Harness, startHarness } from '../support/worker-harness.js';

let harness: Harness | undefined;
afterEach(async () => {
  await harness?.close();
  harness = undefined;
});

const tenKb = 'x'.repeat(10_240);

describe('malformed job payloads', () => {
  const enrollment: [string, unknown, RegExp][] = [
    ['userId a number', { userId: 42 }, /userId: must be a string/],
    ['userId empty', { userId: '' }, /userId: must not be empty/],
    ['userId of 10 kB', { userId: tenKb }, /userId: must be at most 256 characters/],
    ['consumerId empty', { consumerId: '' }, /consumerId: must be 2 to 100 characters/],
    ['consumerId of 10 kB', { consumerId: tenKb }, /consumerId: must be 2 to 100 characters/],
    ['consumerId a number', { consumerId: 12345 }, /consumerId: /],
    ['consumerId an array', { consumerId: ['ab'] }, /consumerId: /],
    ['consumerId an object', { consumerId: { id: 'ab' } }, /consumerId: /],
    ['consumerId null', { consumerId: null }, /consumerId: /],
    ['consumerId with bad characters', { consumerId: 'a b/c' }, /consumerId: must match/],
    [
      'an unknown consent',
      { consumerId: 'ok_consent', extraConsents: ['BASIC', 'NOPE'] },
      /extraConsents\[1\]/,
    ],
    ['consents not a list', { consumerId: 'ok_list', removedConsents: 'BASIC' }, /removedConsents/],
    // The producer derives the consumer id once; a job must carry it.
    ['no consumerId', { userId: 'customer-1', extraConsents: ['BASIC'] }, /consumerId: /],
    ['an unknown key', { consumerId: 'ok_key', admin: true }, /admin/],
    ['not an object', 'enroll me', /\(payload\)/],
  ];

  const sync: [string, unknown, RegExp][] = [
    ['consumerId missing', {}, /consumerId: /],
    ['consumerId a number', { consumerId: 7 }, /consumerId: /],
    ['consumerId empty', { consumerId: '' }, /consumerId: must be 2 to 100 characters/],
    ['consumerId of 10 kB', { consumerId: tenKb }, /consumerId: must be 2 to 100 characters/],
    ['an unknown reason', { consumerId: 'ok_reason', reason: 'whim' }, /reason: /],
  ];

  const batch: [string, unknown, RegExp][] = [
    ['consumerIds empty', { consumerIds: [] }, /consumerIds: must not be empty/],
    ['consumerIds repeated', { consumerIds: ['ok_a', 'ok_a'] }, /consumerIds: must not repeat/],
    ['one consumer id bad', { consumerIds: ['ok_a', 'a b/c'] }, /consumerIds\[1\]: must match/],
    ['consumerIds a string', { consumerIds: 'ok_a' }, /consumerIds: /],
    [
      '101 consumer ids',
      { consumerIds: Array.from({ length: 101 }, (_, i) => `ok_${i}`) },
      /consumerIds: must hold at most 100/,
    ],
  ];

  it('fails each at once, naming the field in a short reason; no request, no row; good jobs still run', async () => {
    harness = await startHarness({ sandbox: { seed: 61 } });
    const h = harness;
    const q = h.runtime.ctx.queues;
    const bad: {
      name: string;
      jobId: string;
      queue: 'enrollment' | 'rewardSync';
      field: RegExp;
    }[] = [];
    for (const [name, data, field] of enrollment) {
      const job = await q.enrollment.add('enroll', data);
      bad.push({ name, jobId: job.id ?? '', queue: 'enrollment', field });
    }
    for (const [name, data, field] of sync) {
      const job = await q.rewardSync.add('sync', data);
      bad.push({ name, jobId: job.id ?? '', queue: 'rewardSync', field });
    }
    for (const [name, data, field] of batch) {
      const job = await q.rewardSync.add(jobNames.syncRewardsBatch, data);
      bad.push({ name, jobId: job.id ?? '', queue: 'rewardSync', field });
    }
    const badReconcile = await q.reconciliation.add('reconcile', { trigger: 'sometimes' });
    // The reconciliation queue: keys that must not be echoed whole, a tick with a field, and a
    // name none of its processors has (with `{}` it would be a whole fan-out).
    const reconciliationQueue = {
      'a key of 10 kB': await q.reconciliation.add('reconcile', { [tenKb]: 1 }),
      '2,000 unknown keys': await q.reconciliation.add(
        'reconcile',
        Object.fromEntries(Array.from({ length: 2000 }, (_, i) => [`extra${i}`, 1])),
      ),
      'a tick with a field': await q.reconciliation.add('reconcile-tick', { admin: true }),
      'an unknown job name': await q.reconciliation.add('reconcile-now', {}),
    };
    h.sandbox.state.addConsumer('good_after', { enrolled: false, rewards: 3 });
    await enqueueEnrollment(q, { consumerId: 'good_after' }, undefined);
    await h.idle(30_000);

    for (const b of bad) {
      const job = await q[b.queue].getJob(b.jobId);
      expect(await job?.getState(), b.name).toBe('failed');
      expect(job?.attemptsMade, b.name).toBe(1);
      expect(job?.failedReason, b.name).toMatch(b.field);
      // A 10 kB id is never echoed back whole.
      expect(job?.failedReason?.length, b.name).toBeLessThan(400);
    }
    const reconcile = await q.reconciliation.getJob(badReconcile.id ?? '');
    expect(await reconcile?.getState()).toBe('failed');
    expect(reconcile?.failedReason).toMatch(/trigger/);
    for (const [name, added] of Object.entries(reconciliationQueue)) {
      const job = await q.reconciliation.getJob(added.id ?? '');
      expect(await job?.getState(), name).toBe('failed');
      expect(job?.failedReason?.length, name).toBeLessThan(400);
    }
    expect(await q.reconciliation.getJobCountByTypes('completed')).toBe(0);

    // Nothing of the bad jobs reached the API or the datastore.
    const counters = h.sandbox.state.counters();
    expect(counters.requests.enroll).toBe(1);
    expect(counters.requests.listRewards).toBe(1);
    const { rows } = await h.runtime.ctx.store.pool.query<{ consumer_id: string }>(
      'select consumer_id from perks.consumers',
    );
    expect(rows.map((r) => r.consumer_id)).toEqual(['good_after']);
    await expectConsistent(h.runtime.ctx.store.pool, h.sandbox, ['good_after']);
  }, 60_000);
});

describe('API bodies that are not what they should be', () => {
  it('200s that are not JSON or have the wrong shape, on every route: retried, nothing written from them', async () => {
    harness = await startHarness({
      sandbox: { seed: 62 },
      env: { PERKS_RETRY_ATTEMPTS: '2', JOB_ATTEMPTS: '10', JOB_BACKOFF_MS: '50' },
    });
    const h = harness;
    const inject = h.sandbox.faults.inject.bind(h.sandbox.faults);
    inject({ route: 'token', count: 1, kind: 'malformed', body: 'not-json' });
    inject({ route: 'token', count: 1, kind: 'malformed', body: 'wrong-shape' });
    // The token minted at start is revoked: the next mint meets the two faults.
    h.sandbox.state.revokeTokens();
    // On 'enroll' a 2xx means the write happened (the sandbox applies it and mangles only the
    // body): the consumer is enrolled once and recorded 'created'.
    inject({
      route: 'enroll',
      consumerId: 'shape_1',
      count: 1,
      kind: 'malformed',
      body: 'not-json',
    });
    inject({
      route: 'enroll',
      consumerId: 'shape_2',
      count: 1,
      kind: 'malformed',
      body: 'wrong-shape',
    });
    inject({ route: 'listRewards', count: 2, kind: 'malformed', body: 'not-json' });
    inject({ route: 'listRewards', count: 2, kind: 'malformed', body: 'wrong-shape' });
    const ids = ['shape_1', 'shape_2', 'shape_3'];
    for (const id of ids) h.sandbox.state.addConsumer(id, { enrolled: false, rewards: 7 });
    for (const consumerId of ids)
      await enqueueEnrollment(h.runtime.ctx.queues, { consumerId }, undefined);
    await h.idle(60_000);

    expect(h.sandbox.faults.list()).toEqual([]);
    expect(h.sandbox.state.counters().enrollmentsCreated).toBe(ids.length);
    for (const id of ids) {
      expect((await h.runtime.ctx.store.getConsumer(id))?.enrollmentOutcome).toBe('created');
    }
    await expectConsistent(h.runtime.ctx.store.pool, h.sandbox, ids);
    expect(await h.runtime.ctx.queues.enrollment.getFailedCount()).toBe(0);
    expect(await h.runtime.ctx.queues.rewardSync.getFailedCount()).toBe(0);
  }, 60_000);

  it('an oversized body (over 8 MB) is cut off unread: the sync fails, nothing written, others go on', async () => {
    harness = await startHarness({ sandbox: { seed: 63 }, env: { JOB_ATTEMPTS: '2' } });
    const h = harness;
    h.sandbox.state.addConsumer('huge', { rewards: 3 });
    h.sandbox.state.addRewardItems('huge', [
      { blob: 'y'.repeat(9 * 1024 * 1024) } as unknown as Partial<RewardJson>,
    ]);
    h.sandbox.state.addConsumer('normal', { rewards: 3 });
    const huge = await enqueueRewardSync(h.runtime.ctx.queues, { consumerId: 'huge' });
    await enqueueRewardSync(h.runtime.ctx.queues, { consumerId: 'normal' });
    await h.idle(60_000);

    const job = await h.runtime.ctx.queues.rewardSync.getJob(huge.id ?? '');
    expect(await job?.getState()).toBe('failed');
    expect(job?.failedReason).toMatch(/maxResponseBytes/);
    expect(await h.rewardIds('huge')).toEqual([]);
    await expectConsistent(h.runtime.ctx.store.pool, h.sandbox, ['normal']);
  }, 60_000);
});

describe('invalid CLI arguments and environment', () => {
  const queues = testQueuePrefix();
  afterAll(() => queues.cleanup());

  function run(args: string[], env: Record<string, string> = {}) {
    const result = spawnSync(process.execPath, [bin, ...args], {
      env: {
        PATH: process.env.PATH ?? '',
        REDIS_URL: queues.redisUrl,
        QUEUE_PREFIX: queues.prefix,
        PERKS_CONSUMER_ID_KEY: 'a-key-of-at-least-16-chars',
        ...env,
      },
      encoding: 'utf8',
      timeout: 20_000,
    });
    return { status: result.status, stdout: result.stdout, stderr: result.stderr };
  }

  it.each([
    [['enroll'], /missing <user-id>/],
    [['enroll', ''], /userId: must not be empty/],
    [['enroll', tenKb], /userId: must be at most 256 characters/],
    [['enroll', 'user_1', '--consent', 'NOPE'], /--consent "NOPE" is not a consent/],
    [['sync'], /missing <consumer-id>/],
    [['sync', 'x'], /"x" is not a consumer id/],
    [['sync', 'bad id!'], /is not a consumer id/],
    [['sync', tenKb], /is not a consumer id/],
    [['failed', '--retry=yes'], /--retry/],
    [['work', '--bogus'], /Unknown option '--bogus'/],
    [['reconcile', 'now'], /unexpected argument "now"/],
  ])('%j exits 2 with one line naming the problem, enqueueing nothing', async (args, problem) => {
    const { status, stderr } = run(args);
    expect(status).toBe(2);
    const lines = stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(problem);
    expect(lines[0]?.length).toBeLessThan(400);
    expect(await keysUnderPrefix()).toEqual([]);
  });

  async function keysUnderPrefix(): Promise<string[]> {
    const { Redis } = await import('ioredis');
    const redis = new Redis(queues.redisUrl, { maxRetriesPerRequest: 1 });
    try {
      return await redis.keys(`${queues.prefix}:*`);
    } finally {
      redis.disconnect();
    }
  }

  it('an invalid environment: every bad variable named at once, no secret echoed, exit 2', () => {
    const { status, stderr } = run(['work'], {
      PERKS_BASE_URL: 'not a url',
      PERKS_CLIENT_ID: 'cli_1',
      PERKS_CLIENT_SECRET: 'sk_sandbox_SECRET_VALUE_123',
      PERKS_TIMEOUT_MS: 'abc',
      PERKS_RETRY_ATTEMPTS: '1e3',
      REDIS_URL: 'http://127.0.0.1:6379',
      DATABASE_POOL_SIZE: '0',
      JOB_ATTEMPTS: '-1',
      LOG_LEVEL: 'loud',
    });
    expect(status).toBe(2);
    for (const name of [
      'PERKS_BASE_URL',
      'PERKS_TIMEOUT_MS',
      'PERKS_RETRY_ATTEMPTS',
      'REDIS_URL',
      'DATABASE_POOL_SIZE',
      'JOB_ATTEMPTS',
      'LOG_LEVEL',
    ]) {
      expect(stderr).toContain(name);
    }
    expect(stderr).not.toContain('SECRET_VALUE');
    expect(stderr).not.toMatch(/\bat .*\.js:\d+/);
  });
});
