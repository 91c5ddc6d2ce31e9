/**
 * A worker in-process for the operations tests: sandbox + runtime + BullMQ workers on real
 * Redis and Postgres, like test/support/worker-harness.ts, plus what those tests need to
 * choose: the logger, BullMQ telemetry, and an operations server serving /metrics.
 */
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Telemetry } from 'bullmq';
import { type Logger, pino } from 'pino';
import type { Config } from '../../../src/config.js';
import { createRuntime, type Runtime } from '../../../src/jobs/runtime.js';
import { type RunningWorker, startWorker } from '../../../src/jobs/worker.js';
import type { Route } from '../../../src/ops/dashboard.js';
import { closeServer, type ReadinessCheck, startOpsServer } from '../../../src/ops/health.js';
import { type Sandbox, type SandboxOptions, startSandbox } from '../../../src/sandbox/index.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';
import { testQueuePrefix } from '../../support/redis.js';

export const rigConsumerIdKey = 'ops-test-consumer-id-key-0123456789';

export interface Rig {
  sandbox: Sandbox;
  runtime: Runtime;
  worker: RunningWorker;
  db: TestDatabase;
  config: Pick<Config, 'perks' | 'consumerIds' | 'redis' | 'database' | 'worker'>;
  /** Base URL of the operations server, e.g. http://127.0.0.1:43121. */
  opsUrl: string;
  idle(timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
}

export interface RigOptions {
  sandbox?: SandboxOptions;
  worker?: Partial<Config['worker']>;
  logger?: Logger;
  telemetry?: Telemetry;
  /** Extra routes of the operations server, given the runtime (its queues). */
  routes?: (runtime: Runtime) => Promise<Route> | Route;
  /** Default: Redis and Postgres of the runtime. */
  checks?: (runtime: Runtime) => ReadinessCheck[];
}

export async function startRig(options: RigOptions = {}): Promise<Rig> {
  const db = await createTestDatabase();
  const queues = testQueuePrefix();
  const sandbox = await startSandbox({ seed: 5, ...options.sandbox });
  const config: Rig['config'] = {
    perks: {
      baseUrl: sandbox.baseUrl,
      clientId: sandbox.clientId,
      clientSecret: sandbox.clientSecret,
      apiVersion: '2.0.0',
      timeoutMs: 2000,
      retryAttempts: 4,
      retryMaxMs: 5000,
      connections: 8,
    },
    consumerIds: { key: rigConsumerIdKey },
    redis: { url: queues.redisUrl, queuePrefix: queues.prefix },
    database: { url: db.url, schema: 'perks', poolSize: 4 },
    worker: {
      rateLimitPerSecond: undefined,
      reconcileCron: '0 3 * * *',
      enrollConcurrency: 4,
      syncConcurrency: 4,
      reconcileBatchSize: 50,
      reconcileMaxPending: 100,
      jobAttempts: 2,
      jobBackoffMs: 50,
      keepCompletedJobs: 10_000,
      keepFailedJobs: 10_000,
      jobLockMs: 30_000,
      shutdownTimeoutMs: 5000,
      port: 0,
      ...options.worker,
    },
  };
  const logger = options.logger ?? pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' });
  const runtime = createRuntime(config, logger);
  const worker = startWorker(
    runtime.ctx,
    runtime.connection,
    queues.prefix,
    config.worker,
    options.telemetry ? { telemetry: options.telemetry } : {},
  );
  const server: Server = await startOpsServer({
    port: 0,
    host: '127.0.0.1',
    logger,
    checks: options.checks?.(runtime) ?? [
      { name: 'redis', check: async () => void (await runtime.connection.ping()) },
      { name: 'postgres', check: () => runtime.ctx.store.ping() },
    ],
    registry: runtime.metrics.registry,
    ...(options.routes ? { routes: await options.routes(runtime) } : {}),
  });
  const { port } = server.address() as AddressInfo;

  return {
    sandbox,
    runtime,
    worker,
    db,
    config,
    opsUrl: `http://127.0.0.1:${port}`,
    async idle(timeoutMs = 30_000) {
      const deadline = Date.now() + timeoutMs;
      let quiet = 0;
      while (Date.now() < deadline) {
        const counts = await Promise.all(
          Object.values(runtime.ctx.queues).map((q) =>
            q.getJobCounts('wait', 'prioritized', 'active', 'delayed'),
          ),
        );
        const pending = counts.reduce((n, c) => n + Object.values(c).reduce((a, b) => a + b, 0), 0);
        quiet = pending === 0 ? quiet + 1 : 0;
        if (quiet >= 3) return;
        await new Promise((r) => setTimeout(r, 50));
      }
      throw new Error(`queues not idle after ${timeoutMs} ms`);
    },
    async close() {
      await closeServer(server);
      await worker.close(2000);
      await runtime.close();
      await sandbox.close();
      await queues.cleanup();
      await db.drop();
    },
  };
}

/** Parses a Prometheus text exposition: `name{a="1",b="2"}` (labels sorted) -> value. */
export function parseMetrics(text: string): Map<string, number> {
  const values = new Map<string, number>();
  for (const line of text.split('\n')) {
    const match = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!match) continue;
    const [, name = '', labels = '', value = ''] = match;
    const sorted = [...labels.matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)]
      .map(([, k, v]) => `${k}="${v}"`)
      .sort()
      .join(',');
    values.set(sorted ? `${name}{${sorted}}` : name, Number(value));
  }
  return values;
}

/** The key parseMetrics uses for a series. */
export function series(name: string, labels: Record<string, string> = {}): string {
  const sorted = Object.entries(labels)
    .map(([k, v]) => `${k}="${v}"`)
    .sort()
    .join(',');
  return sorted ? `${name}{${sorted}}` : name;
}

export async function scrape(opsUrl: string): Promise<Map<string, number>> {
  const response = await fetch(`${opsUrl}/metrics`);
  if (response.status !== 200) throw new Error(`/metrics answered ${response.status}`);
  return parseMetrics(await response.text());
}

/** after - before for each series (a series absent counts as 0). */
export function delta(
  before: Map<string, number>,
  after: Map<string, number>,
  name: string,
  labels: Record<string, string> = {},
): number {
  const key = series(name, labels);
  return (after.get(key) ?? 0) - (before.get(key) ?? 0);
}
