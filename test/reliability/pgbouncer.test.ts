/**
 * The worker through PgBouncer in transaction pooling mode (test/support/pgbouncer.ts), where
 * every transaction may run on another server connection. Migrations run through it (replicas
 * racing on one server connection included); a missing database is created on
 * DATABASE_DIRECT_URL. Enrollment, sync and reconciliation end with the datastore equal to the
 * sandbox. The outbox enqueues a committed row within 2 s: woken by its LISTEN on
 * DATABASE_DIRECT_URL, or, without it, by polling alone (LISTEN through PgBouncer hears nothing).
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import { loadMigrationFiles, migrate } from '../../src/store/migrate.js';
import { type PgBouncer, startPgBouncer } from '../support/pgbouncer.js';
import {
  bin,
  expectConsistent,
  type ProcessRig,
  sleep,
  startProcessRig,
  startWorkerProcess,
  type WorkerProcess,
  waitFor,
} from '../support/processes.js';
import { targetOf } from '../support/tcp-proxy.js';

const execFileAsync = promisify(execFile);
const adminUrl = inject('adminDatabaseUrl');

let rig: ProcessRig;
let bouncer: PgBouncer;
/** The signup service's pool, through PgBouncer like the worker's. */
let signups: pg.Pool;
let worker: WorkerProcess | undefined;
const createdDatabases: string[] = [];

beforeAll(async () => {
  rig = await startProcessRig({ sandbox: { seed: 31 } });
  bouncer = await startPgBouncer({
    target: targetOf(rig.db.url),
    user: new URL(rig.db.url).username,
  });
  signups = new pg.Pool({ connectionString: bouncer.urlFor(rig.db.url), max: 2 });
});

afterEach(async () => {
  await worker?.stop();
  worker = undefined;
});

afterAll(async () => {
  await signups?.end();
  await bouncer?.stop();
  await rig?.close();
  const admin = new pg.Client(adminUrl);
  await admin.connect();
  for (const name of createdDatabases) {
    await admin.query(`drop database if exists ${name} with (force)`);
  }
  await admin.end();
});

/** A database that does not exist yet (dropped after the file, and by the run's sweep). */
function newDatabaseUrl(): { url: string; name: string } {
  const runPid = inject('templateDatabase').split('_').pop();
  const name = `perks_test_pgb${randomBytes(5).toString('hex')}_${runPid}`;
  createdDatabases.push(name);
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return { url: url.toString(), name };
}

async function runMigrate(env: Record<string, string>) {
  return execFileAsync(process.execPath, [bin, 'migrate'], {
    env: { PATH: process.env.PATH ?? '', ...env },
    timeout: 30_000,
  });
}

async function advisoryLocksHeld(url: string): Promise<number> {
  const client = new pg.Client(url);
  await client.connect();
  try {
    const { rows } = await client.query<{ n: number }>(
      `select count(*)::int as n from pg_locks where locktype = 'advisory'
          and database = (select oid from pg_database where datname = current_database())`,
    );
    return rows[0]?.n ?? -1;
  } finally {
    await client.end();
  }
}

function startWorker(env: Record<string, string>): WorkerProcess {
  return startWorkerProcess(
    rig.workerEnv({
      DATABASE_URL: bouncer.urlFor(rig.db.url),
      DATABASE_POOL_SIZE: '4',
      SYNC_CONCURRENCY: '4',
      ...env,
    }),
  );
}

const started = (w: WorkerProcess) =>
  waitFor('the worker to start', () =>
    w.output().includes('"worker started"') ? true : undefined,
  );

/** Commits a signup through PgBouncer; resolves with the ms until the worker enqueued it. */
async function outboxLatency(userId: string): Promise<number> {
  const { rows } = await signups.query<{ id: string }>(
    'select perks.enqueue_enrollment($1) as id',
    [userId],
  );
  const committedAt = Date.now();
  const jobId = await waitFor(
    `outbox row of ${userId} to be enqueued`,
    async () => {
      const { rows: row } = await rig.store.pool.query<{ job_id: string | null }>(
        'select job_id from perks.signup_outbox where id = $1 and processed_at is not null',
        [rows[0]?.id],
      );
      return row[0]?.job_id ?? undefined;
    },
    5000,
    20,
  );
  const latency = Date.now() - committedAt;
  expect(await rig.producer.queues.enrollment.getJob(jobId)).toBeDefined();
  return latency;
}

describe('perks-worker migrate through PgBouncer', () => {
  const atLatest = async (schema: string) => {
    const files = await loadMigrationFiles();
    return `schema ${schema} is at ${files.at(-1)?.version} (${files.length} migrations)`;
  };

  it('creates a missing database on DATABASE_DIRECT_URL, then finds nothing to do', async () => {
    const { url, name } = newDatabaseUrl();
    const files = await loadMigrationFiles();
    const first = await runMigrate({ DATABASE_URL: bouncer.urlFor(url), DATABASE_DIRECT_URL: url });
    expect(first.stdout).toBe(
      [
        `created database ${name}`,
        ...files.map((f) => `applied ${f.file}`),
        await atLatest('perks'),
        '',
      ].join('\n'),
    );
    const again = await runMigrate({ DATABASE_URL: bouncer.urlFor(url) });
    expect(again.stdout).toBe(`${await atLatest('perks')}\n`);
  });

  it('without DATABASE_DIRECT_URL, applies every migration through PgBouncer; no lock left held', async () => {
    const files = await loadMigrationFiles();
    const pooled = await runMigrate({
      DATABASE_URL: bouncer.urlFor(rig.db.url),
      DATABASE_SCHEMA: 'perks_pooled',
    });
    expect(pooled.stdout).toBe(
      [...files.map((f) => `applied ${f.file}`), await atLatest('perks_pooled'), ''].join('\n'),
    );
    expect(await advisoryLocksHeld(rig.db.url)).toBe(0);
  });

  it('without DATABASE_DIRECT_URL, says a missing database cannot be created through PgBouncer', async () => {
    const { url, name } = newDatabaseUrl();
    const failed = await runMigrate({ DATABASE_URL: bouncer.urlFor(url) }).catch(
      (error: { code: number; stdout: string; stderr: string }) => error,
    );
    expect(failed).toMatchObject({ code: 1, stdout: '' });
    expect(failed.stderr).toBe(
      `perks-worker: migrate: cannot reach PostgreSQL at 127.0.0.1:${bouncer.port} (database ${name}): database "${name}" does not exist (08P01)\n`,
    );
  });

  it('replicas racing on a single server connection apply each migration once', async () => {
    // One server connection for all: the clients take turns on one session, so a session
    // lock taken by one would already be held, for the others too.
    const narrow = await startPgBouncer({
      target: targetOf(rig.db.url),
      user: new URL(rig.db.url).username,
      poolSize: 1,
    });
    try {
      const url = narrow.urlFor(rig.db.url);
      const results = await Promise.all(
        Array.from({ length: 3 }, () => migrate({ databaseUrl: url, schema: 'perks_race' })),
      );
      const files = await loadMigrationFiles();
      expect(results.flatMap((r) => r.applied).sort()).toEqual(files.map((f) => f.file));
      expect(results.map((r) => r.current)).toEqual(results.map(() => files.at(-1)?.version));
      const { rows } = await rig.store.pool.query<{ n: number }>(
        'select count(*)::int as n from perks_race.schema_migrations',
      );
      expect(rows[0]?.n).toBe(files.length);
      expect(await advisoryLocksHeld(rig.db.url)).toBe(0);
    } finally {
      await narrow.stop();
    }
  });
});

describe('perks-worker work through PgBouncer', () => {
  it('enrolls, syncs and reconciles through it: the datastore equals the sandbox', async () => {
    const { sandbox, producer, store } = rig;
    const ids = Array.from({ length: 12 }, (_, i) => `pgb_${i}`);
    ids.forEach((id, i) => {
      sandbox.state.addConsumer(id, { enrolled: false, rewards: i === 0 ? 2500 : 5 + i * 20 });
    });
    // Polling the outbox every 10 s: only the NOTIFY, heard on the direct LISTEN session,
    // gets a signup enqueued within 2 s (checked at the end).
    worker = startWorker({ DATABASE_DIRECT_URL: rig.db.url, OUTBOX_POLL_MS: '10000' });
    const w = worker;
    for (const consumerId of ids) await producer.enqueueEnrollment({ consumerId });

    // Each enrollment is followed by a first sync.
    await waitFor(
      'every consumer enrolled and synced',
      async () => {
        const { rows } = await store.pool.query<{ n: number }>(
          `select count(*)::int as n from perks.consumers
            where consumer_id = any($1) and last_synced_at is not null`,
          [ids],
        );
        return rows[0]?.n === ids.length ? true : undefined;
      },
      30_000,
      200,
    ).catch((error) => {
      throw new Error(`${error}\n${w.output().slice(-3000)}\n${bouncer.log().slice(-2000)}`);
    });
    await expectConsistent(store.pool, sandbox, ids);

    // Upstream changes that only the reconciliation's syncs can bring in.
    for (const id of ids.slice(0, 4)) {
      const [reward] = sandbox.state.rewardsOf(id) as { id: string }[];
      if (reward) sandbox.state.setRewardStatus(id, reward.id, 'redeemed');
      sandbox.state.addRewards(id, 3);
    }
    const { jobId } = await producer.startReconciliation();
    await waitFor(
      'the reconciliation and its syncs',
      async () => {
        const job = await producer.queues.reconciliation.getJob(jobId);
        if (!job?.finishedOn) return undefined;
        const pending = await producer.queues.rewardSync.getJobCounts(
          'wait',
          'prioritized',
          'delayed',
          'active',
        );
        return Object.values(pending).every((n) => n === 0) ? true : undefined;
      },
      30_000,
      200,
    );
    const reconciliation = await producer.queues.reconciliation.getJob(jobId);
    expect(await reconciliation?.getState()).toBe('completed');
    await expectConsistent(store.pool, sandbox, ids);
    expect(await producer.queues.rewardSync.getFailedCount()).toBe(0);
    expect(await producer.queues.enrollment.getFailedCount()).toBe(0);

    expect(await outboxLatency('pgb_outbox_direct')).toBeLessThan(2000);
    const through = (await bouncer.stats()).find((s) => s.database === rig.db.name);
    expect(Number(through?.total_xact_count)).toBeGreaterThan(ids.length);
    expect(w.alive(), w.output()).toBe(true);
  }, 60_000);

  it('without DATABASE_DIRECT_URL, polling alone enqueues each committed outbox row within 2 s', async () => {
    // LISTEN then goes through PgBouncer: it succeeds, but its server connection returns to
    // the pool and the notifications are dropped there.
    worker = startWorker({});
    await started(worker);
    const latencies: number[] = [];
    for (let i = 0; i < 5; i++) {
      // At varying points of the drain's poll interval (OUTBOX_POLL_MS, default 1000).
      await sleep(150 + i * 190);
      latencies.push(await outboxLatency(`pgb_outbox_poll_${i}`));
    }
    expect(Math.max(...latencies), `latencies ${latencies.join(', ')} ms`).toBeLessThan(2000);
    expect(worker.alive(), worker.output()).toBe(true);
  }, 30_000);
});
