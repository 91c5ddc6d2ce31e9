/**
 * The composition root: the one function that starts a whole worker process from a Config,
 * called by `work`, the demo, the bench and the tests alike, so that they run what production
 * runs. A part is switched off as an operator does it: PORT=0 (a free port), WEBHOOK_URL,
 * INTAKE_TOKEN and INTAKE_AMQP_URL unset, OUTBOX=off, PERKS_RECONCILE_CRON=off.
 * It lives at the top of src/ because it joins every folder (jobs, intake, events, ops), and
 * none of them may import the others' assembly.
 */
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { type Config, insecureHttpWarning } from './config.js';
import { startWebhooks, type Webhooks } from './events/index.js';
import { type Intake, startIntake } from './intake/index.js';
import { createRuntime, type Runtime } from './jobs/runtime.js';
import { registerReconcileSchedule } from './jobs/schedule.js';
import { type RunningWorker, startWorker } from './jobs/worker.js';
import { createDashboard, dashboardPath } from './ops/dashboard.js';
import { closeServer, PortInUseError, startOpsServer } from './ops/health.js';
import type { Logger } from './ops/logger.js';
import { within } from './ops/timeouts.js';
import { startTracing, type Tracing } from './ops/tracing.js';
import { consumerIdKeyWarning } from './queues/consumer-id.js';
import { pingQueueStore } from './redis/connection.js';
import { MigrationChecksumError, MigrationFileError } from './store/errors.js';
import { migrate } from './store/migrate.js';

export interface StartOptions {
  logger: Logger;
  /** Do not apply the migrations (a deploy step runs `migrate`). */
  skipMigrate?: boolean;
  /** Resolves on SIGTERM/SIGINT: the start-up mint, which waits for Redis, is not waited for then. */
  stopping?: Promise<unknown>;
}

export interface PerksWorker {
  /** The queues, store, API client and metrics the jobs run on. */
  runtime: Runtime;
  worker: RunningWorker;
  intake: Intake;
  webhooks: Webhooks | undefined;
  tracing: Tracing | undefined;
  /** The port of the operations server (PORT=0: a free one). */
  opsPort: number;
  /** Intake first, so nothing new is taken while the jobs in hand finish (SHUTDOWN_TIMEOUT_MS). */
  close(): Promise<{ timedOut: boolean }>;
}

/** Postgres may still be starting (compose, k8s): keep trying the migration this long. */
const migrateDeadlineMs = 60_000;

export async function startPerksWorker(
  config: Config,
  options: StartOptions,
): Promise<PerksWorker> {
  const { logger } = options;
  for (const warning of [
    consumerIdKeyWarning(config.consumerIds.key),
    insecureHttpWarning(config.perks),
  ]) {
    if (warning) logger.warn(warning);
  }
  // Safe from every replica at once: migrate() holds an advisory lock and is idempotent.
  if (!options.skipMigrate) await migrateWithRetry(config.database, logger);
  // Before the runtime and the intake, whose queues get the telemetry.
  const { otlpEndpoint: endpoint, otelServiceName: serviceName } = config.worker;
  const tracing = endpoint ? await startTracing({ endpoint, serviceName, logger }) : undefined;
  const runtime = createRuntime(config, logger, tracing ? { telemetry: tracing.telemetry } : {});
  const { intake, server } = await listen(config, runtime, logger, tracing);
  const { minted, worker, webhooks } = await startJobs(config, runtime, options, tracing);
  const scheduled = scheduleReconciliation(config, runtime, logger);
  const opsPort = (server.address() as AddressInfo).port;
  logger.info(
    {
      port: opsPort,
      dashboard: config.worker.dashboardPassword ? dashboardPath : 'off',
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
  return {
    runtime,
    worker,
    intake,
    webhooks,
    tracing,
    opsPort,
    async close() {
      await intake.close();
      await webhooks?.close();
      const stopped = await worker.close(config.worker.shutdownTimeoutMs);
      await scheduled;
      await closeServer(server);
      await runtime.close();
      // Bounded: a collector that is down must not hold the exit past the grace period.
      if (tracing) await within(5000, tracing.shutdown());
      return stopped;
    },
  };
}

/**
 * The jobs, after one mint: wrong credentials or a token endpoint that is down show at once
 * (an error line, /readyz, `status`) and pause the API queues until a mint works.
 */
async function startJobs(
  config: Config,
  runtime: Runtime,
  { logger, stopping }: StartOptions,
  tracing: Tracing | undefined,
): Promise<{ minted: boolean; worker: RunningWorker; webhooks: Webhooks | undefined }> {
  const minted = await Promise.race([
    runtime.mintOutage.probe(),
    ...(stopping ? [stopping.then(() => false)] : []),
  ]);
  const worker = startWorker(
    runtime.ctx,
    runtime.connection,
    config.redis.queuePrefix,
    config.worker,
    tracing ? { telemetry: tracing.telemetry } : {},
  );
  const webhooks = startWebhooks(config, {
    store: runtime.ctx.store,
    connection: runtime.connection,
    metrics: runtime.metrics,
    logger,
  });
  return { minted, worker, webhooks };
}

/** Registers (or with `off` removes) the cron; a failure is logged, the worker runs on. */
function scheduleReconciliation(config: Config, runtime: Runtime, logger: Logger): Promise<void> {
  const { ctx, connection } = runtime;
  const { queuePrefix } = config.redis;
  return registerReconcileSchedule(
    ctx.queues,
    connection,
    queuePrefix,
    config.worker.reconcileCron,
    logger,
  ).then(
    () => undefined,
    (error: unknown) =>
      logger.error(
        { err: { message: String(error) } },
        'could not register the reconciliation schedule',
      ),
  );
}

/**
 * The intake and the operations server, before any job is taken: a replica whose health
 * endpoints or intake cannot listen (PORT or INTAKE_PORT taken) would be invisible or deaf,
 * so it stops instead, releasing what it opened.
 */
async function listen(
  config: Config,
  runtime: Runtime,
  logger: Logger,
  tracing: Tracing | undefined,
): Promise<{ intake: Intake; server: Server }> {
  let intake: Intake | undefined;
  try {
    intake = await startIntake(config, {
      pool: runtime.ctx.store.pool,
      logger,
      metrics: runtime.metrics,
      ...(tracing ? { tracing } : {}),
    });
    const { dashboardUser: user, dashboardPassword: password } = config.worker;
    const dashboard = password
      ? await createDashboard({ queues: Object.values(runtime.ctx.queues), user, password })
      : undefined;
    const server = await startOpsServer({
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
    return { intake, server };
  } catch (error) {
    await intake?.close();
    await runtime.close();
    if (tracing) await within(5000, tracing.shutdown());
    if ((error as NodeJS.ErrnoException).code === 'EADDRINUSE') {
      throw new PortInUseError('PORT', config.worker.port);
    }
    throw error;
  }
}

async function migrateWithRetry(database: Config['database'], logger: Logger): Promise<void> {
  const deadline = Date.now() + migrateDeadlineMs;
  for (let attempt = 1; ; attempt++) {
    try {
      const result = await migrate({
        databaseUrl: database.directUrl ?? database.url,
        schema: database.schema,
        logger,
      });
      if (result.applied.length > 0)
        logger.info({ applied: result.applied, current: result.current }, 'migrations applied');
      return;
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
