/**
 * The HTTP intake against real Redis, and through the in-process worker and sandbox: what a
 * signup service in any language sees, answer by answer, and that 1,000 enrollments with
 * duplicates enroll each consumer exactly once upstream.
 */
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type HttpIntake, startHttpIntake } from '../../../src/intake/http.js';
import { createMetrics, type Metrics } from '../../../src/ops/metrics.js';
import { within } from '../../../src/ops/timeouts.js';
import {
  closeQueues,
  defaultJobPolicy,
  openQueues,
  type Queues,
} from '../../../src/queues/queues.js';
import { createRedisConnection, type RedisClient } from '../../../src/redis/connection.js';
import { type Harness, startHarness } from '../../support/worker-harness.js';

const token = 'intake-test-token-0123456789abcdef';
const logger = pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' });

let harness: Harness;
let connection: RedisClient;
let queues: Queues;
let metrics: Metrics;
let intake: HttpIntake;
let base = '';

beforeAll(async () => {
  harness = await startHarness({ sandbox: { seed: 61 } });
  // The intake's own fail-fast connection, as `work` opens it.
  connection = createRedisConnection(harness.config.redis, 'producer', logger);
  queues = openQueues(connection, harness.prefix, defaultJobPolicy, logger);
  metrics = createMetrics({ defaultMetrics: false });
  intake = await startHttpIntake({
    port: 0,
    host: '127.0.0.1',
    token,
    queues,
    consumerIdKey: harness.config.consumerIds.key,
    logger,
    metrics,
  });
  base = `http://127.0.0.1:${intake.port}`;
});

afterAll(async () => {
  await intake?.close();
  await closeQueues(queues);
  connection?.disconnect();
  await harness?.close();
});

function post(path: string, body: unknown, headers: Record<string, string> = {}) {
  return fetch(`${base}${path}`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${token}`,
      'content-type': 'application/json',
      ...headers,
    },
    body: typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body),
  });
}

async function enrollmentJobs(): Promise<number> {
  return queues.enrollment.getJobCountByTypes('wait', 'active', 'delayed', 'completed', 'failed');
}

describe('HTTP intake', () => {
  it('refuses a missing or wrong token with 401, whatever the path', async () => {
    for (const authorization of [undefined, `Bearer ${token}x`, `Basic ${token}`, token]) {
      const response = await fetch(`${base}/v1/enrollments`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          ...(authorization ? { authorization } : {}),
        },
        body: JSON.stringify({ user_id: 'nobody' }),
      });
      expect(response.status, authorization).toBe(401);
    }
    expect((await fetch(`${base}/nowhere`)).status).toBe(401);
  });

  it('answers 404, 405, 413, 415 and 400 for bad JSON, each with an error', async () => {
    const auth = { authorization: `Bearer ${token}` };
    const notFound = await fetch(`${base}/v1/nothing`, { headers: auth });
    expect(notFound.status).toBe(404);
    const wrongMethod = await fetch(`${base}/v1/enrollments`, { headers: auth });
    expect(wrongMethod.status).toBe(405);
    expect(wrongMethod.headers.get('allow')).toBe('POST');
    const huge = await post('/v1/enrollments', { user_id: 'x'.repeat(1024 * 1024 + 10) });
    expect(huge.status).toBe(413);
    const text = await post('/v1/enrollments', 'user_id=a', { 'content-type': 'text/plain' });
    expect(text.status).toBe(415);
    const badJson = await post('/v1/enrollments', '{"user_id": ');
    expect(badJson.status).toBe(400);
    for (const response of [notFound, wrongMethod, huge, text, badJson]) {
      expect(typeof ((await response.json()) as { error: unknown }).error).toBe('string');
    }
  });

  it('refuses a user_id sent in bytes that are not UTF-8 (Latin-1 é, è): 400, not one consumer for two', async () => {
    const before = await enrollmentJobs();
    for (const byte of [0xe9, 0xe8]) {
      const body = Buffer.concat([
        Buffer.from('{"user_id":"Jos'),
        Buffer.from([byte]),
        Buffer.from('"}'),
      ]);
      const response = await post('/v1/enrollments', body);
      expect(response.status).toBe(400);
      expect(((await response.json()) as { errors: unknown[] }).errors).toEqual([
        { index: 0, field: 'user_id', message: expect.stringMatching(/^must not contain U\+FFFD/) },
      ]);
    }
    expect(await enrollmentJobs()).toBe(before);
  });

  it('accepts one signup with 202, and tells a duplicate of a pending one', async () => {
    const first = await post('/v1/enrollments', {
      user_id: 'http_one',
      extra_consents: ['TARGETING'],
    });
    expect(first.status).toBe(202);
    const body = (await first.json()) as { enrollments: Record<string, unknown>[] };
    expect(body.enrollments).toEqual([
      {
        user_id: 'http_one',
        consumer_id: 'http_one',
        job_id: expect.any(String),
        duplicate: false,
      },
    ]);
    const again = await post('/v1/enrollments', [{ user_id: 'http_one' }]);
    expect(again.status).toBe(202);
    const second = (await again.json()) as { enrollments: Record<string, unknown>[] };
    expect(second.enrollments[0]).toMatchObject({
      duplicate: true,
      job_id: body.enrollments[0]?.job_id,
    });
    // A user id that is not a consumer id gets its derived one (PERKS_CONSUMER_ID_KEY).
    const derived = await post('/v1/enrollments', { user_id: 'customer 8812@example' });
    const [one] = ((await derived.json()) as { enrollments: { consumer_id: string }[] })
      .enrollments;
    expect(one?.consumer_id).toMatch(/^u_[a-z2-7]{52}$/);
  });

  it('refuses a batch of 10 with one malformed item whole: 400 naming it, nothing enqueued', async () => {
    const before = await enrollmentJobs();
    const items: unknown[] = Array.from({ length: 10 }, (_, i) => ({ user_id: `http_batch_${i}` }));
    items[7] = { user_id: 'http_batch_7', extra_consents: ['TARGETING', 'NOT_A_CONSENT'] };
    items[3] = { user_id: 'http_batch_3', extra_consent: ['TARGETING'] };
    items[5] = { user_id: 'http_batch_5', extra_consents: ['BASIC'], removed_consents: ['BASIC'] };
    const response = await post('/v1/enrollments', items);
    expect(response.status).toBe(400);
    const body = (await response.json()) as { error: string; errors: unknown[] };
    expect(body.error).toMatch(/nothing was accepted/);
    expect(body.errors).toEqual([
      { index: 3, field: 'extra_consent', message: 'is not a known field' },
      { index: 5, field: 'removed_consents', message: 'BASIC is also an extra consent' },
      { index: 7, field: 'extra_consents[1]', message: expect.any(String) },
    ]);
    expect(await enrollmentJobs()).toBe(before);

    for (const bad of [
      [],
      Array.from({ length: 1001 }, (_, i) => ({ user_id: `u${i}` })),
      'x',
      null,
    ]) {
      const refused = await post('/v1/enrollments', JSON.stringify(bad));
      expect(refused.status, JSON.stringify(bad).slice(0, 20)).toBe(400);
    }
    expect(await enrollmentJobs()).toBe(before);
  });

  it('accepts sync requests, one or many, with their job ids', async () => {
    harness.sandbox.state.addConsumer('http_sync_a', { rewards: 2 });
    const response = await post('/v1/syncs', [
      { consumer_id: 'http_sync_a' },
      { consumer_id: 'http_sync_b' },
    ]);
    expect(response.status).toBe(202);
    const body = (await response.json()) as { syncs: { consumer_id: string; job_id: string }[] };
    expect(body.syncs.map((s) => s.consumer_id)).toEqual(['http_sync_a', 'http_sync_b']);
    expect(body.syncs.every((s) => s.job_id.length > 0)).toBe(true);
    // Again while they wait: the pending jobs absorb it (a retry after a 503 is safe).
    await harness.worker.workers.rewardSync.pause();
    try {
      const first = await post('/v1/syncs', { consumer_id: 'http_sync_c' });
      const again = await post('/v1/syncs', [
        { consumer_id: 'http_sync_c' },
        { consumer_id: 'http_sync_c_2' },
      ]);
      const ids = async (r: Response) =>
        ((await r.json()) as { syncs: { job_id: string }[] }).syncs.map((x) => x.job_id);
      const [firstId] = await ids(first);
      const [againId, otherId] = await ids(again);
      expect(againId).toBe(firstId);
      expect(otherId).not.toBe(firstId);
    } finally {
      harness.worker.workers.rewardSync.resume();
    }
    const invalid = await post('/v1/syncs', { consumer_id: 'no spaces allowed' });
    expect(invalid.status).toBe(400);
    expect(((await invalid.json()) as { errors: { field: string }[] }).errors[0]?.field).toBe(
      'consumer_id',
    );
  });

  it('enrolls each of 1,000 signups with duplicates exactly once upstream', async () => {
    await harness.idle(30_000);
    const created = harness.sandbox.state.counters().enrollmentsCreated;
    // 800 customers; 200 of them sent twice, in the same request or the next one.
    const users = Array.from({ length: 800 }, (_, i) => `http_bulk_${i}`);
    const sent = [...users, ...users.slice(0, 200)];
    for (let i = 0; i < sent.length; i += 500) {
      const response = await post(
        '/v1/enrollments',
        sent.slice(i, i + 500).map((user_id) => ({ user_id })),
      );
      expect(response.status).toBe(202);
    }
    await harness.idle(60_000);
    expect(harness.sandbox.state.counters().enrollmentsCreated - created).toBe(800);
    const { rows } = await harness.runtime.ctx.store.pool.query<{ n: number }>(
      "select count(*)::int as n from perks.consumers where consumer_id like 'http_bulk_%' and enrolled_at is not null",
    );
    expect(rows[0]?.n).toBe(800);
    const scraped = await metrics.scrape();
    expect(scraped).toMatch(
      /perks_worker_intake_events_total\{source="http",outcome="duplicate"\} [1-9]/,
    );
  }, 90_000);

  it('answers 503 for signups that need PERKS_CONSUMER_ID_KEY on a replica without it, 400 when one is also invalid', async () => {
    const keyless = await startHttpIntake({
      port: 0,
      host: '127.0.0.1',
      token,
      queues,
      consumerIdKey: undefined,
      logger,
      metrics,
    });
    try {
      const send = (body: unknown) =>
        fetch(`http://127.0.0.1:${keyless.port}/v1/enrollments`, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
          body: JSON.stringify(body),
        });
      const before = await enrollmentJobs();
      const waiting = await send([
        { user_id: 'http_keyless_ok' },
        { user_id: 'someone@example.com' },
      ]);
      expect(waiting.status).toBe(503);
      expect(waiting.headers.get('retry-after')).toBe('30');
      expect(await waiting.json()).toMatchObject({
        error:
          'this replica has no PERKS_CONSUMER_ID_KEY to derive the consumer id of 1 item(s) (the first: item 1); nothing was accepted, retry later',
        errors: [{ index: 1, field: 'user_id' }],
      });
      const invalid = await send([{ user_id: 'someone@example.com' }, { user_id: '' }]);
      expect(invalid.status).toBe(400);
      expect(await enrollmentJobs()).toBe(before);
    } finally {
      await keyless.close();
    }
  });

  it('answers 503 while Redis is unreachable, and claims nothing', async () => {
    const dead = createRedisConnection({ url: 'redis://127.0.0.1:1' }, 'producer', logger);
    const deadQueues = openQueues(dead, harness.prefix, defaultJobPolicy, logger);
    const down = await startHttpIntake({
      port: 0,
      host: '127.0.0.1',
      token,
      queues: deadQueues,
      consumerIdKey: undefined,
      logger,
      metrics,
    });
    try {
      const response = await fetch(`http://127.0.0.1:${down.port}/v1/enrollments`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ user_id: 'http_redis_down' }),
      });
      expect(response.status).toBe(503);
      expect(await response.json()).toEqual({
        error: expect.stringMatching(/retry later; part of the request may be enqueued/),
      });
    } finally {
      await down.close();
      await within(2000, closeQueues(deadQueues));
      dead.disconnect();
    }
  });
});
