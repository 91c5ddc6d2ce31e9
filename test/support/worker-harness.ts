/**
 * Sandbox + worker + real Redis and Postgres, in-process, for end-to-end tests of the job
 * processors. Each harness gets its own database and queue prefix.
 */
import type { Telemetry } from 'bullmq';
import { type Logger, pino } from 'pino';
import { rewardEventTypes } from '../../src/config/events.js';
import type { Config } from '../../src/config.js';
import { createRuntime, type Runtime, type RuntimeConfig } from '../../src/jobs/runtime.js';
import { type RunningWorker, startWorker } from '../../src/jobs/worker.js';
import { type Sandbox, type SandboxOptions, startSandbox } from '../../src/sandbox/index.js';
import { createTestDatabase, type TestDatabase } from './database.js';
import { testQueuePrefix } from './redis.js';

export const testConsumerIdKey = 'test-consumer-id-key-0123456789';

export interface Harness {
  sandbox: Sandbox;
  runtime: Runtime;
  worker: RunningWorker;
  db: TestDatabase;
  prefix: string;
  config: RuntimeConfig;
  /** Resolves when no job is waiting, delayed or active in any queue. */
  idle(timeoutMs?: number): Promise<void>;
  rewardIds(consumerId: string): Promise<string[]>;
  close(): Promise<void>;
}

export interface HarnessOptions {
  sandbox?: SandboxOptions;
  perks?: Partial<Config['perks']>;
  worker?: Partial<Config['worker']>;
  /** Default: every event type recorded, no webhook. */
  events?: Partial<Config['events']>;
  /** Default: silent (TEST_LOG_LEVEL to see it). */
  logger?: Logger;
  /** BullMQ telemetry for the workers (tracing tests). */
  telemetry?: Telemetry;
}

export async function startHarness(options: HarnessOptions = {}): Promise<Harness> {
  const db = await createTestDatabase();
  const queues = testQueuePrefix();
  const sandbox = await startSandbox({ seed: 3, ...options.sandbox });
  const config: Harness['config'] = {
    perks: {
      baseUrl: sandbox.baseUrl,
      clientId: sandbox.clientId,
      clientSecret: sandbox.clientSecret,
      apiVersion: '2.0.0',
      timeoutMs: 1000,
      retryAttempts: 4,
      retryMaxMs: 5000,
      connections: 8,
      ...options.perks,
    },
    consumerIds: { key: testConsumerIdKey },
    redis: { url: queues.redisUrl, queuePrefix: queues.prefix },
    database: { url: db.url, schema: 'perks', poolSize: 5 },
    worker: {
      rateLimitPerSecond: undefined,
      reconcileCron: '0 3 * * *',
      enrollConcurrency: 4,
      syncConcurrency: 4,
      syncConsumersPerJob: 8,
      reconcileBatchSize: 50,
      reconcileMaxPending: 100,
      jobAttempts: 4,
      jobBackoffMs: 50,
      keepCompletedJobs: 10_000,
      keepFailedJobs: 10_000,
      jobLockMs: 30_000,
      shutdownTimeoutMs: 5000,
      port: 0,
      opsHost: '127.0.0.1',
      dashboardUser: 'admin',
      ...options.worker,
    },
    events: {
      types: [...rewardEventTypes],
      webhookTimeoutMs: 10_000,
      webhookMaxAgeHours: 72,
      webhookConcurrency: 16,
      ...options.events,
    },
  };
  const logger = options.logger ?? pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' });
  const runtime = createRuntime(
    config,
    logger,
    options.telemetry ? { telemetry: options.telemetry } : {},
  );
  const worker = startWorker(
    runtime.ctx,
    runtime.connection,
    queues.prefix,
    config.worker,
    options.telemetry ? { telemetry: options.telemetry } : {},
  );

  return {
    sandbox,
    runtime,
    worker,
    db,
    prefix: queues.prefix,
    config,
    async idle(timeoutMs = 20_000) {
      const deadline = Date.now() + timeoutMs;
      let quietChecks = 0;
      while (Date.now() < deadline) {
        const counts = await Promise.all(
          Object.values(runtime.ctx.queues).map((q) =>
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
      await worker.close(2000);
      await runtime.close();
      await sandbox.close();
      await queues.cleanup();
      await db.drop();
    },
  };
}

/** The reward ids the sandbox holds for a consumer, sorted like `rewardIds`. */
export function upstreamRewardIds(sandbox: Sandbox, consumerId: string): string[] {
  return (sandbox.state.rewardsOf(consumerId) as { id: string }[]).map((r) => r.id).sort();
}
