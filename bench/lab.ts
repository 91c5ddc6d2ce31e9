/**
 * The bench's test bench: one fresh database per run (perks_bench_<pid>), and per measurement
 * a "lab": its own schema in that database, its own queue prefix, a sandbox (on its own
 * thread) and the worker `work` runs (startPerksWorker) in-process, on the real Redis and
 * Postgres, configured through the variables an operator sets.
 */
import { Redis } from 'ioredis';
import pg from 'pg';
import { pino } from 'pino';
import { type PerksWorker, startPerksWorker } from '../src/app.js';
import { type Config, configGroups, loadConfig, type WorkerConfig } from '../src/config.js';
import type { Runtime } from '../src/jobs/runtime.js';
import { syncsInFlight as syncsInFlightOf } from '../src/jobs/sync-rewards-batch.js';
import type { RunningWorker } from '../src/jobs/worker.js';
import type { Logger } from '../src/ops/logger.js';
import type { JobQueueKind } from '../src/queues/names.js';
import { deletePrefix } from '../src/redis/connection.js';
import type { SandboxOptions } from '../src/sandbox/index.js';
import { quoteIdentifier } from '../src/store/identifier.js';
import { migrate } from '../src/store/migrate.js';
import type { BenchEnvironment } from './env.js';
import { type RemoteSandbox, startRemoteSandbox } from './remote-sandbox.js';

export interface BenchRun {
  env: BenchEnvironment;
  database: string;
  databaseUrl: string;
  /** Pool on the bench database, for the bench's own queries (WAL, row counts). */
  pool: pg.Pool;
  /** Pool on the admin database. */
  admin: pg.Pool;
  /** For inspection (INFO, SCAN); never handed to a worker. */
  redis: Redis;
  close(): Promise<void>;
}

export function withDatabase(url: string, database: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${database}`;
  return parsed.toString();
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Drops the databases and Redis keys of bench runs whose process is gone (killed runs). */
async function dropStaleRuns(admin: pg.Pool, redis: Redis): Promise<void> {
  const { rows } = await admin.query<{ datname: string }>(
    "select datname from pg_database where datname ~ '^perks_bench_[0-9]+$'",
  );
  for (const { datname } of rows) {
    const pid = Number(datname.slice('perks_bench_'.length));
    if (pid === process.pid || pidAlive(pid)) continue;
    await admin.query(`drop database if exists ${quoteIdentifier(datname)} with (force)`);
    await deletePrefix(redis, `${datname}_*`);
  }
}

/**
 * An idle client whose backend ends (close() drops the database WITH (FORCE) while a client of
 * pool.end() may still be closing) emits 'error' on its pool: without a listener that crashes
 * the run after its results. A query on a broken client still fails.
 */
function ignoreIdleErrors(pool: pg.Pool): void {
  pool.on('error', () => undefined);
}

/**
 * Runs every step, in order, even after one fails, then throws the first failure: a lab half
 * closed would keep its workers and sandbox thread running through the scenarios after it.
 */
async function closeAll(steps: ReadonlyArray<() => Promise<unknown>>): Promise<void> {
  let first: { error: unknown } | undefined;
  for (const step of steps) {
    try {
      await step();
    } catch (error) {
      first ??= { error };
    }
  }
  if (first) throw first.error;
}

export async function openBenchRun(env: BenchEnvironment): Promise<BenchRun> {
  const database = `perks_bench_${process.pid}`;
  const admin = new pg.Pool({ connectionString: env.adminDatabaseUrl, max: 2 });
  ignoreIdleErrors(admin);
  const redis = new Redis(env.redisUrl, { maxRetriesPerRequest: 3 });
  await dropStaleRuns(admin, redis);
  await admin.query(`drop database if exists ${quoteIdentifier(database)} with (force)`);
  await admin.query(`create database ${quoteIdentifier(database)}`);
  const databaseUrl = withDatabase(env.adminDatabaseUrl, database);
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 4 });
  ignoreIdleErrors(pool);
  return {
    env,
    database,
    databaseUrl,
    pool,
    admin,
    redis,
    async close() {
      await pool.end();
      await admin
        .query(`drop database if exists ${quoteIdentifier(database)} with (force)`)
        .finally(() => admin.end());
      redis.disconnect();
    },
  };
}

/** A migrated schema of the bench database (each measurement writes into empty tables). */
export async function createSchema(run: BenchRun, schema: string): Promise<void> {
  await run.pool.query(`drop schema if exists ${quoteIdentifier(schema)} cascade`);
  await migrate({ databaseUrl: run.databaseUrl, schema });
}

export async function dropSchema(run: BenchRun, schema: string): Promise<void> {
  await run.pool.query(`drop schema if exists ${quoteIdentifier(schema)} cascade`);
}

/** The settings of a default deployment (an empty environment): what a user runs. */
const defaults = loadConfig(['worker', 'database'], {});
export const defaultWorker: WorkerConfig = defaults.worker;
export const defaultPoolSize = defaults.database.poolSize;

/**
 * Consumer syncs one replica runs at once on a fan-out (config.ts), by default settings. The
 * bare loop runs as many writers.
 */
export const syncsInFlight = (worker: WorkerConfig = defaultWorker) => syncsInFlightOf(worker);

export interface LabOptions {
  /** Names the schema and the queue prefix: lower-case letters, digits and _. */
  name: string;
  sandbox: SandboxOptions;
  /** Variables over the lab's own, as an operator sets them (SYNC_CONCURRENCY=16). */
  env?: Record<string, string>;
}

export interface Lab {
  name: string;
  schema: string;
  prefix: string;
  /** On its own thread, as the real API is on another machine. */
  sandbox: RemoteSandbox;
  runtime: Runtime;
  worker: RunningWorker;
  config: Config;
  /** Jobs completed and failed for good, per queue, since the lab started. */
  counts: Record<JobQueueKind, { completed: number; failed: number }>;
  /** Resolves once `condition` holds (polled every 5 ms); rejects on a job failed for good. */
  until(condition: () => boolean, timeoutMs: number): Promise<void>;
  close(): Promise<void>;
}

/**
 * Logs as production does (info, JSON) but into /dev/null: the cost of logging is part of
 * the worker's cost, the bench's terminal stays readable.
 */
function benchLogger(): Logger {
  return pino({ level: 'info' }, pino.destination({ dest: '/dev/null', sync: true }));
}

export async function startLab(run: BenchRun, options: LabOptions): Promise<Lab> {
  const schema = `bench_${options.name}`;
  const prefix = `perks_bench_${process.pid}_${options.name}`;
  await createSchema(run, schema);
  await deletePrefix(run.redis, prefix);
  const sandbox = await startRemoteSandbox({ seed: 1, ...options.sandbox });
  const started: { app?: PerksWorker } = {};
  const close = () =>
    closeAll([
      async () => started.app?.close(),
      () => sandbox.close(),
      () => deletePrefix(run.redis, prefix),
      () => dropSchema(run, schema),
    ]);
  try {
    const config = loadConfig(configGroups, {
      PERKS_BASE_URL: sandbox.baseUrl,
      PERKS_CLIENT_ID: sandbox.clientId,
      PERKS_CLIENT_SECRET: sandbox.clientSecret,
      REDIS_URL: run.env.redisUrl,
      QUEUE_PREFIX: prefix,
      DATABASE_URL: run.databaseUrl,
      DATABASE_SCHEMA: schema,
      // BENCH_EVENT_TYPES (env.ts): the same runs with and without the reward events.
      EVENT_TYPES: run.env.eventTypes.join(',') || 'none',
      PERKS_RECONCILE_CRON: 'off',
      EVENT_RETENTION_DAYS: 'off',
      OUTBOX: 'off',
      PORT: '0',
      OPS_HOST: '127.0.0.1',
      ...options.env,
      ...run.env.workerEnv,
    });
    const app = await startPerksWorker(config, { logger: benchLogger(), skipMigrate: true });
    started.app = app;
    const { runtime, worker } = app;
    const counts: Lab['counts'] = {
      enrollment: { completed: 0, failed: 0 },
      rewardSync: { completed: 0, failed: 0 },
      reconciliation: { completed: 0, failed: 0 },
    };
    let failure: string | undefined;
    for (const [kind, w] of Object.entries(worker.workers) as [
      JobQueueKind,
      RunningWorker['workers'][JobQueueKind],
    ][]) {
      w.on('completed', () => {
        counts[kind].completed += 1;
      });
      w.on('failed', (job, error) => {
        if (job?.finishedOn === undefined) return; // an attempt; BullMQ retries it
        counts[kind].failed += 1;
        failure ??= `${kind} job ${job.id} failed: ${error.message}`;
      });
    }
    await Promise.all(Object.values(worker.workers).map((w) => w.waitUntilReady()));

    return {
      name: options.name,
      schema,
      prefix,
      sandbox,
      runtime,
      worker,
      config,
      counts,
      async until(condition, timeoutMs) {
        const deadline = Date.now() + timeoutMs;
        while (!condition()) {
          if (failure) throw new Error(`lab ${options.name}: ${failure}`);
          if (Date.now() > deadline) {
            throw new Error(`lab ${options.name}: condition not met within ${timeoutMs} ms`);
          }
          await new Promise((resolve) => setTimeout(resolve, 5));
        }
      },
      close,
    };
  } catch (error) {
    // What started is stopped, or it would run on through the scenarios after this one.
    await close().catch(() => undefined);
    throw error;
  }
}

/** Current WAL position; the difference of two is the WAL written in between (cluster-wide). */
export async function walPosition(run: BenchRun): Promise<string> {
  const { rows } = await run.pool.query<{ lsn: string }>(
    'select pg_current_wal_lsn()::text as lsn',
  );
  return rows[0]?.lsn ?? '0/0';
}

export async function walBytesSince(run: BenchRun, start: string): Promise<number> {
  const { rows } = await run.pool.query<{ bytes: string }>(
    'select pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint::text as bytes',
    [start],
  );
  return Number(rows[0]?.bytes ?? 0);
}
