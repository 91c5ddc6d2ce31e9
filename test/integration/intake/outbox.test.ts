/**
 * The signup outbox against real PostgreSQL and Redis, through the in-process worker and
 * sandbox: rows added by enqueue_enrollment() in a transaction become enrollment jobs once it
 * commits, and each consumer is enrolled once upstream, whatever fails in between.
 */
import { Writable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  type OutboxDrain,
  type OutboxOptions,
  startOutboxDrain,
} from '../../../src/intake/outbox.js';
import type { IntakeOutcome } from '../../../src/ops/metrics.js';
import { deriveConsumerId } from '../../../src/queues/consumer-id.js';
import {
  closeQueues,
  defaultJobPolicy,
  openQueues,
  type Queues,
} from '../../../src/queues/queues.js';
import { connected, createRedisConnection } from '../../../src/redis/connection.js';
import { deleteProcessedSignups } from '../../../src/store/outbox.js';
import { testQueuePrefix } from '../../support/redis.js';
import { startTcpProxy, targetOf } from '../../support/tcp-proxy.js';
import { type Harness, startHarness, testConsumerIdKey } from '../../support/worker-harness.js';

let h: Harness;
/** The signup service's own pool: it adds the rows. */
let pool: pg.Pool;
const cleanups: (() => Promise<void>)[] = [];

beforeAll(async () => {
  h = await startHarness({ sandbox: { seed: 62 }, env: { ENROLL_CONCURRENCY: '16' } });
  pool = new pg.Pool({ connectionString: h.db.url, max: 4 });
});
afterAll(async () => {
  await pool?.end();
  await h?.close();
});
beforeEach(async () => {
  await pool.query('truncate perks.signup_outbox restart identity');
});
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  await h.idle();
});

interface Rig {
  drain: OutboxDrain;
  queues: Queues;
  counts: Record<IntakeOutcome, number>;
  logs: { level: number; msg: string }[];
}

/**
 * A drain as `work` runs it (its own pool, queues on a fail-fast connection), with counting
 * metrics and captured logs; resolves once its first pass is done.
 */
async function startRig(
  options: Partial<OutboxOptions> & { redisUrl?: string; poolUrl?: string; prefix?: string } = {},
): Promise<Rig> {
  const { redisUrl = h.config.redis.url, poolUrl = h.db.url, prefix = h.prefix } = options;
  const { redisUrl: _r, poolUrl: _p, prefix: _x, ...overrides } = options;
  const connection = createRedisConnection({ url: redisUrl }, 'producer');
  await connected(connection);
  const queues = openQueues(connection, prefix, defaultJobPolicy);
  const drainPool = new pg.Pool({ connectionString: poolUrl, max: 2 });
  drainPool.on('error', () => undefined);
  const counts = { accepted: 0, duplicate: 0, rejected: 0 };
  const logs: Rig['logs'] = [];
  const stream = new Writable({
    write(chunk, _encoding, done) {
      logs.push(JSON.parse(String(chunk)));
      done();
    },
  });
  const drain = startOutboxDrain({
    pool: drainPool,
    databaseUrl: h.db.url,
    schema: 'perks',
    queues,
    consumerIdKey: testConsumerIdKey,
    pollMs: 1000,
    retentionDays: 7,
    logger: pino({ level: 'info' }, stream),
    metrics: {
      intake(_source, outcome, count = 1) {
        counts[outcome] += count;
      },
    },
    listen: false,
    ...overrides,
  });
  cleanups.push(async () => {
    await drain.close();
    await closeQueues(queues);
    connection.disconnect();
    await drainPool.end();
  });
  await drain.drainNow();
  return { drain, queues, counts, logs };
}

/** Adds a signup as a client service does, in a transaction of its own; returns the row id. */
async function signup(userId: string, extra?: string[], removed?: string[]): Promise<string> {
  const { rows } = await pool.query<{ id: string }>(
    'select perks.enqueue_enrollment($1, $2, $3) as id',
    [userId, extra ?? null, removed ?? null],
  );
  return rows[0]?.id ?? '';
}

interface OutboxRecord {
  id: string;
  user_id: string;
  processed_at: Date | null;
  job_id: string | null;
  error: string | null;
}

async function outboxRows(): Promise<OutboxRecord[]> {
  const { rows } = await pool.query<OutboxRecord>(
    'select id, user_id, processed_at, job_id, error from perks.signup_outbox order by id',
  );
  return rows;
}

async function waitingRows(): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(
    'select count(*)::int as n from perks.signup_outbox where processed_at is null',
  );
  return rows[0]?.n ?? -1;
}

/** Milliseconds from now until the row has its job id; fails after `limitMs`. */
async function msUntilEnqueued(id: string, limitMs: number): Promise<number> {
  const start = Date.now();
  while (Date.now() - start < limitMs) {
    const { rows } = await pool.query(
      'select 1 from perks.signup_outbox where id = $1 and job_id is not null',
      [id],
    );
    if (rows.length > 0) return Date.now() - start;
    await sleep(20);
  }
  throw new Error(`outbox row ${id} not enqueued within ${limitMs} ms`);
}

/** Waits until this many outbox LISTEN sessions are open on the test database. */
async function listening(sessions: number): Promise<void> {
  await expect
    .poll(
      async () => {
        const { rows } = await pool.query<{ n: number }>(
          `select count(*)::int as n from pg_stat_activity
            where datname = current_database() and application_name = 'perks-worker outbox listener'
              and query ilike 'listen %'`,
        );
        return rows[0]?.n;
      },
      { timeout: 10_000, interval: 50 },
    )
    .toBe(sessions);
}

async function enrollmentJobs(queues: Queues): Promise<number> {
  return queues.enrollment.getJobCountByTypes(
    'wait',
    'active',
    'delayed',
    'prioritized',
    'completed',
    'failed',
  );
}

const messages = (rig: Rig, msg: string) => rig.logs.filter((l) => l.msg === msg);

describe('signup outbox', () => {
  it('drains 1,000 rows, repeated and derived user ids among them: each consumer enrolled exactly once upstream', async () => {
    const before = h.sandbox.state.counters();
    const userIds = Array.from({ length: 800 }, (_, i) =>
      i % 4 === 0 ? `customer.${i}@example.com` : `outbox-${i}`,
    );
    const repeated = userIds.filter((_, i) => i % 4 <= 1).slice(0, 200);
    const all = [...userIds, ...repeated];
    const rig = await startRig({ listen: true });
    // Ten signup transactions of 100 rows.
    for (let i = 0; i < all.length; i += 100) {
      await pool.query(
        `select perks.enqueue_enrollment(u, array['TARGETING']) from unnest($1::text[]) as u`,
        [all.slice(i, i + 100)],
      );
    }
    await expect.poll(waitingRows, { timeout: 15_000, interval: 100 }).toBe(0);
    await h.idle(30_000);

    const rows = await outboxRows();
    expect(rows).toHaveLength(1000);
    expect(rows.filter((r) => r.job_id === null || r.error !== null)).toEqual([]);
    expect(rig.counts.accepted + rig.counts.duplicate).toBe(1000);
    expect(rig.counts.accepted).toBeGreaterThanOrEqual(800);
    expect(rig.counts.rejected).toBe(0);
    const after = h.sandbox.state.counters();
    expect(after.enrollmentsCreated - before.enrollmentsCreated).toBe(800);
    const consumerIds = userIds.map((u) => deriveConsumerId(u, testConsumerIdKey));
    expect(consumerIds.filter((id) => id.startsWith('u_'))).toHaveLength(200);
    const { rows: enrolled } = await pool.query<{ n: number }>(
      `select count(*)::int as n from perks.consumers
        where consumer_id = any($1) and enrolled_at is not null`,
      [consumerIds],
    );
    expect(enrolled[0]?.n).toBe(800);
  });

  it('leaves nothing behind for a rolled-back signup', async () => {
    const rig = await startRig();
    const jobsBefore = await enrollmentJobs(rig.queues);
    const client = await pool.connect();
    try {
      await client.query('begin');
      await client.query(`select perks.enqueue_enrollment('rolled-back-1')`);
      await client.query('rollback');
    } finally {
      client.release();
    }
    await signup('committed-1');
    expect(await rig.drain.drainNow()).toBe(1);
    expect((await outboxRows()).map((r) => r.user_id)).toEqual(['committed-1']);
    expect((await enrollmentJobs(rig.queues)) - jobsBefore).toBe(1);
  });

  it('refuses an invalid row: its error names the field, it is processed, it has no job', async () => {
    const rig = await startRig();
    const jobsBefore = await enrollmentJobs(rig.queues);
    await signup('x'.repeat(300));
    await signup('bad-consent-1', ['TARGETING', 'FREE_LUNCH']);
    await signup('good-1', ['TARGETING'], []);
    await signup('both-1', ['BASIC'], ['BASIC']);
    expect(await rig.drain.drainNow()).toBe(4);

    const [tooLong, badConsent, good, both] = await outboxRows();
    expect(tooLong).toMatchObject({
      error: 'user_id: must be at most 256 characters',
      job_id: null,
      processed_at: expect.any(Date),
    });
    expect(badConsent?.error).toMatch(/^extra_consents\[1\]: /);
    expect(badConsent).toMatchObject({ job_id: null, processed_at: expect.any(Date) });
    expect(good).toMatchObject({ error: null, job_id: expect.stringMatching(/^enroll-good-1-/) });
    expect(both).toMatchObject({
      error: 'removed_consents: BASIC is also an extra consent',
      job_id: null,
      processed_at: expect.any(Date),
    });
    expect(rig.counts).toEqual({ accepted: 1, duplicate: 0, rejected: 3 });
    expect((await enrollmentJobs(rig.queues)) - jobsBefore).toBe(1);
    const job = await rig.queues.enrollment.getJob(good?.job_id ?? '');
    expect(job?.data).toMatchObject({ userId: 'good-1', consumerId: 'good-1' });
    expect(messages(rig, 'outbox rows refused; see their error')).toHaveLength(1);
  });

  it('leaves a row that needs PERKS_CONSUMER_ID_KEY waiting on a replica without it, and drains the rows behind it', async () => {
    // One row a batch: a claim of the waiting row would take the whole batch.
    const keyless = await startRig({ consumerIdKey: undefined, batchSize: 1 });
    const id = await signup('someone@example.com');
    const after = await signup('good-after-1');
    expect(await keyless.drain.drainNow()).toBe(1);
    await keyless.drain.close();
    const rows = await outboxRows();
    expect(rows.find((r) => r.id === id)).toMatchObject({ processed_at: null, error: null });
    expect(rows.find((r) => r.id === after)).toMatchObject({
      job_id: expect.stringMatching(/^enroll-/),
    });
    expect(keyless.logs.map((l) => l.msg)).toContain(
      'outbox: rows whose user_id is not a consumer id wait for a replica with PERKS_CONSUMER_ID_KEY',
    );
    const keyed = await startRig();
    expect(await keyed.drain.drainNow()).toBe(0); // its first pass took it
    const row = (await outboxRows()).find((r) => r.id === id);
    expect(row).toMatchObject({ error: null, job_id: expect.stringMatching(/^enroll-/) });
  });

  it('enqueues a committed row within 2 s through NOTIFY, with polling once a minute', async () => {
    await startRig({ listen: true, pollMs: 60_000 });
    await listening(1);
    for (const userId of ['notified-1', 'notified-2']) {
      const id = await signup(userId);
      expect(await msUntilEnqueued(id, 2000)).toBeLessThan(2000);
    }
  });

  it('enqueues a committed row within 2 s by polling alone (listen: false, as behind PgBouncer)', async () => {
    await startRig({ listen: false, pollMs: 1000 });
    for (const userId of ['polled-1', 'polled-2']) {
      const id = await signup(userId);
      expect(await msUntilEnqueued(id, 2000)).toBeLessThan(2000);
      await sleep(300);
    }
  });

  it('lets two replicas share the rows: each row enqueued once, none left', async () => {
    // Jobs to a prefix no worker reads: only the enqueue is under test.
    const redis = testQueuePrefix();
    cleanups.push(redis.cleanup);
    await pool.query(
      `select perks.enqueue_enrollment('replica-' || i) from generate_series(1, 1000) as i`,
    );
    const [a, b] = await Promise.all([
      startRig({ batchSize: 50, prefix: redis.prefix }),
      startRig({ batchSize: 50, prefix: redis.prefix }),
    ]);
    expect(a.counts.accepted + b.counts.accepted).toBe(1000);
    expect(a.counts.duplicate + b.counts.duplicate).toBe(0);
    expect(a.counts.accepted).toBeGreaterThan(0);
    expect(b.counts.accepted).toBeGreaterThan(0);
    expect(await waitingRows()).toBe(0);
    expect(await enrollmentJobs(a.queues)).toBe(1000);
  });

  it('enqueues again a batch whose connection died before its commit: one job, one enrollment', async () => {
    // The first update of the outbox kills its own session: a crash after the enqueue.
    await pool.query(`
      create sequence perks.test_crash_once;
      create function perks.test_crash_once() returns trigger language plpgsql as $$
      begin
        if nextval('perks.test_crash_once') = 1 then
          perform pg_terminate_backend(pg_backend_pid());
        end if;
        return new;
      end $$;
      create trigger test_crash_once before update on perks.signup_outbox
        for each row execute function perks.test_crash_once();`);
    cleanups.push(async () => {
      h.worker.workers.enrollment.resume();
      await pool.query(`drop trigger test_crash_once on perks.signup_outbox;
        drop function perks.test_crash_once(); drop sequence perks.test_crash_once;`);
    });
    await h.worker.workers.enrollment.pause();
    const before = h.sandbox.state.counters();
    const rig = await startRig({ pollMs: 60_000 });
    const id = await signup('crashed-once-1');

    await expect(rig.drain.drainNow()).rejects.toThrow(/terminat/);
    expect(await waitingRows()).toBe(1);
    const [pending, ...others] = await rig.queues.enrollment.getWaiting();
    expect(others).toEqual([]);
    expect(rig.counts).toEqual({ accepted: 0, duplicate: 0, rejected: 0 });

    expect(await rig.drain.drainNow()).toBe(1);
    expect((await outboxRows()).find((r) => r.id === id)?.job_id).toBe(pending?.id);
    expect(rig.counts).toEqual({ accepted: 0, duplicate: 1, rejected: 0 });
    expect(await rig.queues.enrollment.getWaitingCount()).toBe(1);

    h.worker.workers.enrollment.resume();
    await h.idle();
    const after = h.sandbox.state.counters();
    expect(after.enrollmentsCreated - before.enrollmentsCreated).toBe(1);
    expect(after.enrollmentsConflicted - before.enrollmentsConflicted).toBe(0);
  });

  it('keeps rows waiting while Redis is unreachable, goes on, and enqueues them once it is back', async () => {
    const proxy = await startTcpProxy(targetOf(h.config.redis.url));
    cleanups.push(() => proxy.close());
    const rig = await startRig({ redisUrl: proxy.urlFor(h.config.redis.url), pollMs: 100 });
    proxy.pause();
    for (const userId of ['redis-away-1', 'redis-away-2', 'redis-away-3']) await signup(userId);
    await sleep(1500);
    expect(await waitingRows()).toBe(3);
    expect(messages(rig, 'outbox drain failed; the rows wait for the next pass')).toHaveLength(1);

    proxy.resume();
    await expect.poll(waitingRows, { timeout: 20_000, interval: 100 }).toBe(0);
    expect((await outboxRows()).filter((r) => r.job_id === null)).toEqual([]);
    expect(rig.counts).toEqual({ accepted: 3, duplicate: 0, rejected: 0 });
    expect(messages(rig, 'outbox drain recovered')).toHaveLength(1);
  });

  it('frees the rows of a replica that vanished mid-batch (its session idle in transaction) for another', async () => {
    const redisProxy = await startTcpProxy(targetOf(h.config.redis.url));
    const pgProxy = await startTcpProxy(targetOf(h.db.url));
    // Its Redis wait outlasts the steps below, so that only PostgreSQL can end its batch.
    const vanishing = await startRig({
      redisUrl: redisProxy.urlFor(h.config.redis.url),
      poolUrl: `${pgProxy.urlFor(h.db.url)}?application_name=perks-test-vanishing`,
      pollMs: 60_000,
      enqueueTimeoutMs: 3000,
    });
    // Run before the rig's own: it cannot close over frozen connections.
    cleanups.push(
      () => redisProxy.close(),
      () => pgProxy.close(),
    );
    for (const userId of ['vanished-1', 'vanished-2', 'vanished-3']) await signup(userId);
    // Its batch claims the rows and waits on Redis; then its host is gone.
    redisProxy.freeze();
    void vanishing.drain.drainNow().catch(() => undefined);
    const idleInTransaction = async () => {
      const { rows } = await pool.query<{ n: number }>(
        `select count(*)::int as n from pg_stat_activity
          where application_name = 'perks-test-vanishing' and state = 'idle in transaction'`,
      );
      return rows[0]?.n;
    };
    await expect.poll(idleInTransaction, { timeout: 5000, interval: 20 }).toBe(1);
    pgProxy.freeze();

    const other = await startRig({ pollMs: 60_000 });
    await expect
      .poll(async () => (await other.drain.drainNow()) + other.counts.accepted, {
        timeout: 15_000,
        interval: 200,
      })
      .toBeGreaterThanOrEqual(3);
    expect(await waitingRows()).toBe(0);
    expect(other.counts.accepted).toBe(3);
  });

  it('logs a lost LISTEN session once, polls meanwhile, and listens again once it reconnects', async () => {
    const proxy = await startTcpProxy(targetOf(h.db.url));
    cleanups.push(() => proxy.close());
    const rig = await startRig({ listen: true, databaseUrl: proxy.urlFor(h.db.url) });
    await listening(1);
    proxy.pause();
    await listening(0);
    const id = await signup('listen-lost-1');
    expect(await msUntilEnqueued(id, 2000)).toBeLessThan(2000);
    // The first reconnection, 1 s after the loss, is refused too.
    await sleep(1000);
    proxy.resume();
    await listening(1);
    expect(messages(rig, 'outbox LISTEN failed; polling alone until it reconnects')).toHaveLength(
      1,
    );
    // The server shows the session listening before the drain has read its answer and logged.
    await expect
      .poll(() => messages(rig, 'outbox LISTEN restored'), { timeout: 5000, interval: 20 })
      .toHaveLength(1);
  });

  it('deletes processed rows past retention, a bounded batch at a time, never a waiting row', async () => {
    for (const userId of ['old-1', 'old-2', 'old-3', 'recent-1', 'waiting-1', 'waiting-2']) {
      await signup(userId);
    }
    await pool.query(`
      update perks.signup_outbox set processed_at = now() - interval '8 days', job_id = 'gone'
       where id <= 3;
      update perks.signup_outbox set processed_at = now() - interval '6 days', job_id = 'kept'
       where id = 4;
      update perks.signup_outbox set created_at = now() - interval '30 days' where id >= 5;`);
    const batch = { retentionDays: 7, limit: 2 };
    expect(await deleteProcessedSignups(pool, '"perks"', batch)).toBe(2);
    expect(await deleteProcessedSignups(pool, '"perks"', batch)).toBe(1);
    expect(await deleteProcessedSignups(pool, '"perks"', batch)).toBe(0);
    expect((await outboxRows()).map((r) => r.user_id)).toEqual([
      'recent-1',
      'waiting-1',
      'waiting-2',
    ]);

    // The drain deletes before it drains: the waiting rows are still waiting then.
    await pool.query(
      `update perks.signup_outbox set processed_at = now() - interval '8 days' where id = 4`,
    );
    const rig = await startRig({ retentionDays: 7 });
    const rows = await outboxRows();
    expect(rows.map((r) => r.user_id)).toEqual(['waiting-1', 'waiting-2']);
    expect(rows.every((r) => r.job_id !== null)).toBe(true);
    expect(messages(rig, 'old outbox rows deleted')).toHaveLength(1);
  });
});
