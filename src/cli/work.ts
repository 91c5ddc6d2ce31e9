import type { Server } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { configGroups, type DatabaseConfig, insecureHttpWarning, loadConfig } from '../config.js';
import { startWebhooks } from '../events/index.js';
import { type Intake, startIntake } from '../intake/index.js';
import { createRuntime } from '../jobs/runtime.js';
import { registerReconcileSchedule } from '../jobs/schedule.js';
import { startWorker } from '../jobs/worker.js';
import { createDashboard, dashboardPath, type Route } from '../ops/dashboard.js';
import { closeServer, PortInUseError, startOpsServer } from '../ops/health.js';
import type { Logger } from '../ops/logger.js';
import { createLogger } from '../ops/logger.js';
import { shutdownSignal } from '../ops/shutdown.js';
import { within } from '../ops/timeouts.js';
import { startTracing, type Tracing } from '../ops/tracing.js';
import { pingQueueStore } from '../queues/connection.js';
import { consumerIdKeyWarning } from '../queues/consumer-id.js';
import { MigrationChecksumError, MigrationFileError } from '../store/errors.js';
import { migrate } from '../store/migrate.js';
import { type CommandSpec, parseCommandArgs } from './command.js';

const spec: CommandSpec = {
  name: 'work',
  config: configGroups,
  summary:
    'Run the worker: enrollment, reward sync and reconciliation jobs, and the signup intake\n(HTTP, outbox table, RabbitMQ) that is configured, until SIGTERM or SIGINT.\nRun as many replicas as you like; they share the work through Redis.',
  options: {
    'skip-migrate': { type: 'boolean' },
  },
  help: [
    '--skip-migrate         do not apply migrations at start (when a deploy step runs `migrate`)',
  ],
};

/** Postgres may still be starting (compose, k8s): keep trying the migration this long. */
const migrateDeadlineMs = 60_000;

export async function run(argv: readonly string[]): Promise<number> {
  const args = parseCommandArgs(spec, argv);
  if (!args) return 0;
  const { values } = args;
  const config = loadConfig(configGroups);
  const logger = createLogger(config.log, { pid: process.pid });
  const keyWarning = consumerIdKeyWarning(config.consumerIds.key);
  if (keyWarning) logger.warn(keyWarning);
  const httpWarning = insecureHttpWarning(config.perks);
  if (httpWarning) logger.warn(httpWarning);
  const stopping = shutdownSignal();

  if (!values['skip-migrate']) {
    // Safe from every replica at once: migrate() holds an advisory lock and is idempotent.
    const result = await migrateWithRetry(config.database, logger);
    if (result.applied.length > 0)
      logger.info({ applied: result.applied, current: result.current }, 'migrations applied');
  }

  // Before the intake, whose queues get the telemetry (pg and undici are instrumented whenever).
  const tracing: Tracing | undefined = config.worker.otlpEndpoint
    ? await startTracing({
        endpoint: config.worker.otlpEndpoint,
        serviceName: config.worker.otelServiceName,
        logger,
      })
    : undefined;
  const runtime = createRuntime(config, logger, tracing ? { telemetry: tracing.telemetry } : {});
  const dashboard: Route | undefined = config.worker.dashboardPassword
    ? await createDashboard({
        queues: Object.values(runtime.ctx.queues),
        user: config.worker.dashboardUser,
        password: config.worker.dashboardPassword,
      })
    : undefined;
  // Before any job is taken: a replica whose health endpoints or intake cannot listen (PORT or
  // INTAKE_PORT taken by another process) would be invisible or deaf, so it exits instead.
  let server: Server;
  let intake: Intake | undefined;
  try {
    intake = await startIntake(config, runtime, logger, tracing);
    server = await startOpsServer({
      port: config.worker.port,
      host: config.worker.opsHost,
      logger,
      checks: [
        {
          name: 'redis',
          check: () => pingQueueStore(runtime.connection, config.redis.queuePrefix),
        },
        { name: 'postgres', check: () => runtime.ctx.store.ping() },
        { name: 'perks api', check: () => runtime.mintOutage.check() },
        ...intake.checks,
      ],
      registry: runtime.metrics.registry,
      ...(dashboard ? { routes: dashboard } : {}),
    });
  } catch (error) {
    await intake?.close();
    await runtime.close();
    if (tracing) await within(5000, tracing.shutdown());
    if ((error as NodeJS.ErrnoException).code === 'EADDRINUSE') {
      throw new PortInUseError('PORT', config.worker.port);
    }
    throw error;
  }
  // Wrong credentials or a token endpoint that is down show at once (an error line, /readyz,
  // `status`), and pause the API queues until a mint works, before any job is taken.
  // The probe waits for Redis, which may be down at start: a SIGTERM meanwhile is not held up.
  const minted = await Promise.race([runtime.mintOutage.probe(), stopping.then(() => false)]);
  const worker = startWorker(
    runtime.ctx,
    runtime.connection,
    config.redis.queuePrefix,
    config.worker,
    tracing ? { telemetry: tracing.telemetry } : {},
  );
  const webhooks = startWebhooks(config, runtime, logger);
  registerReconcileSchedule(
    runtime.ctx.queues,
    runtime.connection,
    config.redis.queuePrefix,
    config.worker.reconcileCron,
    logger,
  ).catch((error: unknown) =>
    logger.error(
      { err: { message: String(error) } },
      'could not register the reconciliation schedule',
    ),
  );
  const address = server.address();
  logger.info(
    {
      port: typeof address === 'object' && address ? address.port : 'off',
      dashboard: dashboard ? dashboardPath : 'off',
      tracing: tracing ? 'on' : 'off',
      perksApi: minted ? 'token minted' : 'token mint failing',
      intake: intake.summary,
      webhooks: webhooks ? new URL(config.events.webhookUrl ?? '').host : 'off',
      prefix: config.redis.queuePrefix,
      enrollConcurrency: config.worker.enrollConcurrency,
      syncConcurrency: config.worker.syncConcurrency,
    },
    'worker started',
  );

  const signal = await stopping;
  logger.info(
    { signal, timeoutMs: config.worker.shutdownTimeoutMs },
    'shutting down: finishing active jobs',
  );
  // Intake first: nothing new is taken while the jobs in hand finish.
  await intake.close();
  await webhooks?.close();
  const { timedOut } = await worker.close(config.worker.shutdownTimeoutMs);
  await closeServer(server);
  await runtime.close();
  // Bounded: a collector that is down must not hold the exit past the grace period.
  if (tracing) await within(5000, tracing.shutdown());
  logger.info({ timedOut }, 'worker stopped');
  // Everything is closed; a reconnecting socket left behind (Redis still down) must not keep
  // the process alive. The timer is unref'd: a clean exit never waits for it.
  setTimeout(() => process.exit(0), 2000).unref();
  return 0;
}

async function migrateWithRetry(database: DatabaseConfig, logger: Logger) {
  const deadline = Date.now() + migrateDeadlineMs;
  for (let attempt = 1; ; attempt++) {
    try {
      return await migrate({
        databaseUrl: database.directUrl ?? database.url,
        schema: database.schema,
        logger,
      });
    } catch (error) {
      const permanent =
        error instanceof MigrationChecksumError || error instanceof MigrationFileError;
      if (permanent || Date.now() > deadline) throw error;
      logger.warn(
        { attempt, err: { message: (error as Error).message } },
        'cannot migrate yet; retrying',
      );
      await sleep(Math.min(1000 * attempt, 5000));
    }
  }
}
