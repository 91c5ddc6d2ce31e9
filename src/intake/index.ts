/**
 * The doors `work` opens when configured: HTTP (INTAKE_TOKEN), OUTBOX, RabbitMQ (INTAKE_AMQP_URL),
 * on a fail-fast Redis connection of their own: a caller must learn at once it was not taken.
 */
import type pg from 'pg';
import type { Config } from '../config.js';
import type { ReadinessCheck } from '../ops/health.js';
import type { Logger } from '../ops/logger.js';
import type { IntakeMetrics } from '../ops/metrics.js';
import { within } from '../ops/timeouts.js';
import type { Tracing } from '../ops/tracing.js';
import { closeQueues, openQueues } from '../queues/queues.js';
import { createRedisConnection } from '../redis/connection.js';
import { startAmqpIntake } from './amqp.js';
import { startHttpIntake } from './http.js';
import { startOutboxDrain } from './outbox.js';

/** What the intake needs from the process (its queues it opens itself, to fail fast). */
export interface IntakeDeps {
  /** The pool the outbox batches run on. */
  pool: pg.Pool;
  logger: Logger;
  metrics: IntakeMetrics;
  /** With tracing on, an enqueue is a span, and HTTP and AMQP signups continue their caller's trace. */
  tracing?: Pick<Tracing, 'telemetry' | 'continueTrace'>;
}

export type Intake = Awaited<ReturnType<typeof startIntake>>;

export async function startIntake(
  config: Pick<Config, 'intake' | 'redis' | 'database' | 'jobs' | 'consumerIds'>,
  deps: IntakeDeps,
) {
  const { redis, intake } = config;
  const connection = createRedisConnection(redis, 'producer', deps.logger);
  const telemetry = deps.tracing?.telemetry;
  const queues = openQueues(connection, redis.queuePrefix, config.jobs, deps.logger, telemetry);
  const closers: (() => Promise<void>)[] = [];
  const close = async () => {
    // Each bounded: a path whose server is gone must not hold the shutdown.
    for (const closer of closers.reverse()) await within(5000, closer());
    await within(5000, closeQueues(queues));
    connection.disconnect();
  };
  const continueTrace = deps.tracing?.continueTrace;
  const door = { queues, consumerIdKey: config.consumerIds.key, ...deps, continueTrace };
  /** Readiness of the paths that have one (RabbitMQ). */
  const checks: ReadinessCheck[] = [];
  /** For the start line: the HTTP port, the outbox, the AMQP queue, or 'off'. */
  const summary = { http: 'off' as number | 'off', outbox: 'off' as 'on' | 'off', amqp: 'off' };
  try {
    if (intake.token) {
      const { port, host, token } = intake;
      const http = await startHttpIntake({ ...door, port, host, token });
      closers.push(http.close);
      summary.http = http.port;
    }
    if (intake.outbox) {
      const outbox = startOutboxDrain({
        ...door,
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
      const { amqpUrl: url, amqpQueue: queue, amqpPrefetch: prefetch } = intake;
      const amqp = await startAmqpIntake({ ...door, url, queue, prefetch });
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
