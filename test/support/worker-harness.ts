/**
 * The worker `work` runs (startPerksWorker), in-process, on a sandbox and the real Redis and
 * Postgres, for end-to-end tests. Each harness gets its own database and queue prefix. A test
 * sets or switches off parts through the variables an operator uses (`env`).
 */
import { type Logger, pino } from 'pino';
import { type PerksWorker, startPerksWorker } from '../../src/app.js';
import { type Config, configGroups, loadConfig } from '../../src/config.js';
import type { Runtime } from '../../src/jobs/runtime.js';
import type { RunningWorker } from '../../src/jobs/worker.js';
import { probeIds } from '../../src/perks/client.js';
import { type Sandbox, type SandboxOptions, startSandbox } from '../../src/sandbox/index.js';
import { createTestDatabase, type TestDatabase } from './database.js';
import { testQueuePrefix } from './redis.js';

export const testConsumerIdKey = 'test-consumer-id-key-0123456789';

export interface Harness {
  sandbox: Sandbox;
  app: PerksWorker;
  runtime: Runtime;
  worker: RunningWorker;
  db: TestDatabase;
  prefix: string;
  config: Config;
  /** Base URL of the operations server, e.g. http://127.0.0.1:43121. */
  opsUrl: string;
  /** Resolves when no job is waiting, delayed or active in any queue but `webhooks`. */
  idle(timeoutMs?: number): Promise<void>;
  rewardIds(consumerId: string): Promise<string[]>;
  close(): Promise<void>;
}

export interface HarnessOptions {
  sandbox?: SandboxOptions;
  /** Environment variables over the harness's own (below). */
  env?: Record<string, string | undefined>;
  /** Default: silent (TEST_LOG_LEVEL to see it). */
  logger?: Logger;
}

export async function startHarness(options: HarnessOptions = {}): Promise<Harness> {
  const db = await createTestDatabase();
  const queues = testQueuePrefix();
  const sandbox = await startSandbox({ seed: 3, ...options.sandbox });
  const config = loadConfig(configGroups, {
    PERKS_BASE_URL: sandbox.baseUrl,
    PERKS_CLIENT_ID: sandbox.clientId,
    PERKS_CLIENT_SECRET: sandbox.clientSecret,
    PERKS_TIMEOUT_MS: '1000',
    PERKS_RETRY_MAX_MS: '5000',
    PERKS_CONNECTIONS: '8',
    PERKS_CONSUMER_ID_KEY: testConsumerIdKey,
    REDIS_URL: queues.redisUrl,
    QUEUE_PREFIX: queues.prefix,
    DATABASE_URL: db.url,
    DATABASE_POOL_SIZE: '5',
    ENROLL_CONCURRENCY: '4',
    SYNC_CONCURRENCY: '4',
    RECONCILE_BATCH_SIZE: '50',
    RECONCILE_MAX_PENDING: '100',
    JOB_ATTEMPTS: '4',
    JOB_BACKOFF_MS: '50',
    KEEP_COMPLETED_JOBS: '10000',
    SHUTDOWN_TIMEOUT_MS: '2000',
    // The schedules would leave a delayed job, and `idle` waits for none; tests that drain an
    // outbox start their own drain.
    PERKS_RECONCILE_CRON: 'off',
    EVENT_RETENTION_DAYS: 'off',
    OUTBOX: 'off',
    PORT: '0',
    OPS_HOST: '127.0.0.1',
    ...options.env,
  });
  const logger = options.logger ?? pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' });
  const app = await startPerksWorker(config, { logger });
  const { runtime } = app;

  const harness: Harness = {
    sandbox,
    app,
    runtime,
    worker: app.worker,
    db,
    prefix: queues.prefix,
    config,
    opsUrl: `http://127.0.0.1:${app.opsPort}`,
    async idle(timeoutMs = 20_000) {
      const deadline = Date.now() + timeoutMs;
      let quietChecks = 0;
      while (Date.now() < deadline) {
        // Deliveries are awaited at the receiver: one that refuses keeps its jobs delayed.
        const { webhooks: _, ...jobQueues } = runtime.ctx.queues;
        const counts = await Promise.all(
          Object.values(jobQueues).map((q) =>
            q.getJobCounts('wait', 'prioritized', 'active', 'delayed'),
          ),
        );
        const pending = counts.reduce((n, c) => n + Object.values(c).reduce((a, b) => a + b, 0), 0);
        // Twice in a row: a finishing job may enqueue the next one (enroll -> sync).
        quietChecks = pending === 0 ? quietChecks + 1 : 0;
        if (quietChecks >= 2) return;
        await new Promise((r) => setTimeout(r, 50));
      }
      throw new Error(`queues not idle after ${timeoutMs} ms`);
    },
    async rewardIds(consumerId) {
      const { rows } = await runtime.ctx.store.pool.query<{ id: string }>(
        'select id from perks.rewards where consumer_id = $1 order by id',
        [consumerId],
      );
      return rows.map((r) => r.id);
    },
    async close() {
      await harness.app.close(); // the app a test may have restarted
      await sandbox.close();
      await queues.cleanup();
      await db.drop();
    },
  };
  return harness;
}

/** The reward ids the sandbox holds for a consumer, sorted like `rewardIds`. */
export function upstreamRewardIds(sandbox: Sandbox, consumerId: string): string[] {
  return (sandbox.state.rewardsOf(consumerId) as { id: string }[]).map((r) => r.id).sort();
}

/** The sandbox's request log less the worker's credentials probes (one at every start). */
export function consumerRequests(sandbox: Sandbox) {
  return sandbox.state.requestLog().filter((entry) => entry.consumerId !== probeIds.consumerId);
}
