/**
 * Shared by the end-to-end and reliability tests: a `perks-worker work` child process, polling, and the
 * check every fault test ends with: the datastore holds exactly the sandbox's rewards.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { expect } from 'vitest';
import { createProducer, type Producer } from '../../src/queues/producer.js';
import type { JobPolicy } from '../../src/queues/queues.js';
import {
  type Sandbox,
  type SandboxOptions,
  sandboxApiEnv,
  startSandbox,
} from '../../src/sandbox/index.js';
import { createStore, type Store } from '../../src/store/store.js';
import { createTestDatabase, type TestDatabase } from './database.js';
import { testQueuePrefix } from './redis.js';

export const bin = fileURLToPath(new URL('../../dist/src/index.js', import.meta.url));

export interface WorkerProcess {
  child: ChildProcess;
  output: () => string;
  exited: Promise<number | null>;
  /** True while the process runs. */
  alive: () => boolean;
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

export interface CliRun {
  status: number | null;
  stdout: string;
  stderr: string;
  /** From spawn to exit. */
  ms: number;
}

/**
 * Runs one `perks-worker` command with only the given environment (plus PATH), to its end.
 * Asynchronous on purpose: a blocked event loop stops draining a worker's or sandbox's output in
 * this process, and stalls it. Killed after `timeoutMs` (default 60 s).
 */
export function runCli(
  args: readonly string[],
  env: Record<string, string>,
  options: { input?: string; timeoutMs?: number } = {},
): Promise<CliRun> {
  const started = Date.now();
  const child = spawn(process.execPath, [bin, ...args], {
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => {
    stdout += chunk.toString();
  });
  child.stderr.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  child.stdin.end(options.input ?? '');
  const killer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 60_000);
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (status) => {
      clearTimeout(killer);
      resolve({ status, stdout, stderr, ms: Date.now() - started });
    });
  });
}

/** Starts `perks-worker work` with only the given environment (plus PATH). */
export function startWorkerProcess(env: Record<string, string>): WorkerProcess {
  const child = spawn(process.execPath, [bin, 'work'], {
    env: { PATH: process.env.PATH ?? '', PORT: '0', LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  let running = true;
  const append = (chunk: Buffer) => {
    // Bounded: a long test must not hold every log line.
    output = (output + chunk.toString()).slice(-200_000);
  };
  child.stdout?.on('data', append);
  child.stderr?.on('data', append);
  const exited = new Promise<number | null>((resolve) =>
    child.on('exit', (code) => {
      running = false;
      resolve(code);
    }),
  );
  return {
    child,
    output: () => output,
    exited,
    alive: () => running,
    async stop(signal = 'SIGTERM') {
      if (running) child.kill(signal);
      return exited;
    },
  };
}

export async function waitFor<T>(
  what: string,
  probe: () => Promise<T | undefined> | T | undefined,
  timeoutMs = 30_000,
  intervalMs = 100,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  while (Date.now() < deadline) {
    try {
      const value = await probe();
      if (value !== undefined) return value;
    } catch (error) {
      lastError = error;
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
  throw new Error(
    `timed out after ${timeoutMs} ms waiting for ${what}${lastError ? ` (last error: ${String(lastError)})` : ''}`,
  );
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The API's decimal string as Postgres `numeric::text` prints it. */
export function canonicalAmount(amount: string): string {
  const negative = amount.startsWith('-');
  const [int = '', frac = ''] = amount.replace(/^[+-]/, '').split('.');
  const whole = int.replace(/^0+(?=\d)/, '') || '0';
  const text = frac ? `${whole}.${frac}` : whole;
  return negative && /[1-9]/.test(text) ? `-${text}` : text;
}

/** `id amount status type` of each present (not missing) reward the datastore holds. */
export async function storedRewards(pool: pg.Pool, consumerId: string): Promise<string[]> {
  const { rows } = await pool.query<{ line: string }>(
    `select id || ' ' || amount::text || ' ' || status || ' ' || type as line
       from perks.rewards where consumer_id = $1 and missing_since is null order by id`,
    [consumerId],
  );
  return rows.map((r) => r.line);
}

/** The same lines built from the sandbox's own data. */
export function upstreamRewards(sandbox: Sandbox, consumerId: string): string[] {
  const items = sandbox.state.rewardsOf(consumerId) as {
    id: string;
    amount: string;
    status: string;
    type: string;
  }[];
  return items.map((r) => `${r.id} ${canonicalAmount(r.amount)} ${r.status} ${r.type}`).sort();
}

/**
 * The final check of every fault test: for each consumer, the datastore's present rewards
 * equal the sandbox's, none lost and none extra (the primary key rules out duplicates).
 */
export async function expectConsistent(
  pool: pg.Pool,
  sandbox: Sandbox,
  consumerIds: readonly string[],
): Promise<void> {
  for (const id of consumerIds) {
    expect(await storedRewards(pool, id), `rewards of ${id}`).toEqual(upstreamRewards(sandbox, id));
  }
}

/**
 * What a test of `work` processes runs against: a fresh database, a sandbox, a queue prefix,
 * a producer and a store on them, and the environment that points a `work` process at them.
 */
export interface ProcessRig {
  db: TestDatabase;
  sandbox: Sandbox;
  queues: ReturnType<typeof testQueuePrefix>;
  producer: Producer;
  store: Store;
  /** `work`'s environment on this rig; `overrides` win (proxied URLs, short locks). */
  workerEnv(overrides?: Record<string, string>): Record<string, string>;
  /** Closes everything and drops the database. */
  close(): Promise<void>;
}

export async function startProcessRig(options: {
  sandbox: SandboxOptions;
  jobPolicy?: JobPolicy;
  /** On this Redis Cluster (REDIS_CLUSTER_NODES), under a hash-tagged prefix. */
  clusterNodes?: readonly { host: string; port: number }[];
}): Promise<ProcessRig> {
  const queues = testQueuePrefix(options.clusterNodes);
  const db = await createTestDatabase();
  const sandbox = await startSandbox(options.sandbox);
  const producer = await createProducer({
    redisUrl: queues.redisUrl,
    queuePrefix: queues.prefix,
    ...(queues.clusterNodes ? { clusterNodes: queues.clusterNodes } : {}),
    ...(options.jobPolicy ? { jobPolicy: options.jobPolicy } : {}),
  });
  const store = createStore({ url: db.url, schema: 'perks', poolSize: 2 });
  return {
    db,
    sandbox,
    queues,
    producer,
    store,
    workerEnv: (overrides = {}) => ({
      ...sandboxApiEnv(sandbox),
      REDIS_URL: queues.redisUrl,
      QUEUE_PREFIX: queues.prefix,
      ...(queues.clusterNodes
        ? { REDIS_CLUSTER_NODES: queues.clusterNodes.map((n) => `${n.host}:${n.port}`).join(',') }
        : {}),
      DATABASE_URL: db.url,
      ...overrides,
    }),
    async close() {
      await producer.close();
      await store.close();
      await sandbox.close();
      await queues.cleanup();
      await db.drop();
    },
  };
}
