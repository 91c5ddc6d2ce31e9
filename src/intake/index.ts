/**
 * The intake paths `work` runs besides its jobs, each on when configured: HTTP
 * (INTAKE_TOKEN), the outbox table (OUTBOX, on by default) and RabbitMQ (INTAKE_AMQP_URL).
 * They enqueue on a Redis connection of their own that fails fast: the worker's waits for
 * Redis for ever, and a caller must learn at once that its signup was not taken.
 */
import type { Config } from '../config.js';
import type { Runtime } from '../jobs/runtime.js';
import type { ReadinessCheck } from '../ops/health.js';
import type { Logger } from '../ops/logger.js';
import { within } from '../ops/timeouts.js';
import type { Tracing } from '../ops/tracing.js';
import { createRedisConnection } from '../queues/connection.js';
import { closeQueues, openQueues } from '../queues/queues.js';
import { startAmqpIntake } from './amqp.js';
import { startHttpIntake } from './http.js';
import { startOutboxDrain } from './outbox.js';

export interface Intake {
  /** Readiness of the paths that have one (RabbitMQ). */
  checks: ReadinessCheck[];
  /** For the start line: the HTTP port, the outbox, the AMQP queue, or 'off'. */
  summary: { http: number | 'off'; outbox: 'on' | 'off'; amqp: string };
  close(): Promise<void>;
}

type IntakeRuntimeConfig = Pick<Config, 'intake' | 'redis' | 'database' | 'worker' | 'consumerIds'>;

/** With tracing on, an enqueue is a span, and HTTP and AMQP signups continue their caller's trace. */
export type IntakeTracing = Pick<Tracing, 'telemetry' | 'continueTrace'>;

export async function startIntake(
  config: IntakeRuntimeConfig,
  runtime: Pick<Runtime, 'metrics' | 'ctx'>,
  logger: Logger,
  tracing?: IntakeTracing,
): Promise<Intake> {
  const { intake } = config;
  const connection = createRedisConnection(config.redis, 'producer', logger);
  const queues = openQueues(
    connection,
    config.redis.queuePrefix,
    config.worker,
    logger,
    tracing?.telemetry,
  );
  const common = {
    queues,
    consumerIdKey: config.consumerIds.key,
    logger,
    metrics: runtime.metrics,
  };
  const traced = tracing ? { continueTrace: tracing.continueTrace } : {};
  const closers: (() => Promise<void>)[] = [];
  const checks: ReadinessCheck[] = [];
  const summary: Intake['summary'] = { http: 'off', outbox: 'off', amqp: 'off' };
  const close = async () => {
    // Each bounded: a path whose server is gone must not hold the shutdown.
    for (const closer of closers.reverse()) await within(5000, closer());
    await within(5000, closeQueues(queues));
    connection.disconnect();
  };

  try {
    if (intake.token) {
      const http = await startHttpIntake({
        ...common,
        ...traced,
        port: intake.port,
        host: intake.host,
        token: intake.token,
      });
      closers.push(http.close);
      summary.http = http.port;
    }
    if (intake.outbox) {
      const outbox = startOutboxDrain({
        ...common,
        pool: runtime.ctx.store.pool,
        // LISTEN needs a session: DATABASE_DIRECT_URL when set (DATABASE_URL may be PgBouncer's
        // transaction pooling, where it hears nothing and the drain's polling alone serves).
        databaseUrl: config.database.directUrl ?? config.database.url,
        schema: config.database.schema,
        pollMs: intake.outboxPollMs,
        retentionDays: intake.outboxRetentionDays,
      });
      closers.push(outbox.close);
      summary.outbox = 'on';
    }
    if (intake.amqpUrl) {
      const amqp = await startAmqpIntake({
        ...common,
        ...traced,
        url: intake.amqpUrl,
        queue: intake.amqpQueue,
        prefetch: intake.amqpPrefetch,
      });
      closers.push(amqp.close);
      checks.push({ name: 'rabbitmq', check: amqp.check });
      summary.amqp = intake.amqpQueue;
    }
  } catch (error) {
    await close();
    throw error;
  }
  return { checks, summary, close };
}
