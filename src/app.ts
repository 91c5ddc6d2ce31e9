/**
 * The composition root: the one function that starts a whole worker process from a Config,
 * called by `work`, the demo, the bench and the tests alike, so that they run what production
 * runs. A part is switched off as an operator does it: PORT=0 (a free port), WEBHOOK_URL,
 * INTAKE_TOKEN and INTAKE_AMQP_URL unset, OUTBOX=off, PERKS_RECONCILE_CRON=off. At the top of
 * src/ because it joins every folder (jobs, intake, events, ops), none of which may import it.
 */
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import v8 from 'node:v8';
import { type Config, insecureHttpWarning } from './config.js';
import { startWebhooks, type Webhooks } from './events/index.js';
import { type Intake, startIntake } from './intake/index.js';
import { createRuntime, type Runtime } from './jobs/runtime.js';
import { registerReconcileSchedule, schedulePruning } from './jobs/schedule.js';
import { type RunningWorker, startWorker } from './jobs/worker.js';
import { createDashboard, dashboardPath } from './ops/dashboard.js';
import { closeServer, listenFailure, startOpsServer } from './ops/health.js';
import type { Logger } from './ops/logger.js';
import { within } from './ops/timeouts.js';
import { startTracing, type Tracing } from './ops/tracing.js';
import { consumerIdKeyWarning } from './queues/consumer-id.js';
import { pingQueueStore } from './redis/connection.js';
import {
  MigrationChecksumError,
  MigrationFileError,
  MigrationRefusedError,
} from './store/errors.js';
import { migrate } from './store/migrate.js';

export interface StartOptions {
  logger: Logger;
  /** Do not apply the migrations (a deploy step runs `migrate`). */
  skipMigrate?: boolean;
  /**
   * Resolves on SIGTERM/SIGINT: the start-up mint, which waits for Redis, is not waited for
   * then, and the migration's retries end with StoppedBeforeStartError.
   */
  stopping?: Promise<unknown>;
}

/** A stop signal came while the start was still waiting for PostgreSQL: nothing was started. */
export class StoppedBeforeStartError extends Error {
  constructor() {
    super('stopped before the worker started: PostgreSQL could not be migrated yet');
    this.name = 'StoppedBeforeStartError';
  }
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
  /** Intake, webhooks and jobs stop taking work at once; the jobs in hand get SHUTDOWN_TIMEOUT_MS. */
  close(): Promise<{ timedOut: boolean }>;
}

export async function startPerksWorker(
  config: Config,
  { logger, skipMigrate, stopping }: StartOptions,
): Promise<PerksWorker> {
  const { consumerIds, perks, redis, worker: settings } = config;
  // After a full collection the old generation may grow to 1.5 × what survived, not V8's up to
  // 4 ×: a worker's garbage is reward pages, and its peak RSS stays near what it holds
  // (bench/README, "Worker memory"). V8 reads the flag at each collection.
  v8.setFlagsFromString('--heap-growing-percent=50');
  for (const warning of [consumerIdKeyWarning(consumerIds.key), insecureHttpWarning(perks)]) {
    if (warning) logger.warn(warning);
  }
  // Safe from every replica at once: migrate() holds an advisory lock and is idempotent.
  if (!skipMigrate) await migrateWithRetry(config.database, logger, stopping);
  // Before the runtime and the intake, whose queues get the telemetry.
  const { otlpEndpoint: endpoint, otelServiceName: serviceName } = settings;
  const tracing = endpoint ? await startTracing({ endpoint, serviceName, logger }) : undefined;
  const telemetry = { telemetry: tracing?.telemetry };
  const runtime = createRuntime(config, logger, telemetry);
  const { ctx, connection, metrics } = runtime;
  const draining = new AbortController();
  const { intake, server } = await listen(config, runtime, logger, tracing, draining.signal);
  const queue = ctx.queues.webhooks;
  let webhooks: ReturnType<typeof startWebhooks>;
  try {
    webhooks = startWebhooks(config, { store: ctx.store, connection, queue, metrics, logger });
  } catch (error) {
    // A start that fails part-way closes what it started: its open handles would keep a
    // process that delivers nothing up, and answering ready, past SIGTERM.
    await intake.close();
    await closeServer(server);
    await runtime.close();
    await stopTracing(tracing);
    throw error;
  }
  // One mint before the jobs: wrong credentials or a token endpoint that is down show at once
  // (an error line, /readyz, `status`) and pause the API queues until a mint works.
  const probe = runtime.mintOutage.probe();
  // undefined: a stop came first, and the mint's outcome is not known.
  const minted = await (stopping ? Promise.race([probe, stopping.then(() => undefined)]) : probe);
  const { queuePrefix: prefix } = redis;
  const worker = startWorker(ctx, connection, prefix, settings, telemetry);
  runtime.mintOutage.attach([worker.workers.enrollment, worker.workers.rewardSync]);
  runtime.datastoreOutage.attach(Object.values(worker.workers));
  // Registers (or with `off` removes) the schedules; a failure is logged, the worker runs on.
  const failed = (what: string) => (error: unknown) =>
    logger.error({ err: { message: String(error) } }, `could not register ${what}`);
  const cron = settings.reconcileCron;
  const scheduled = Promise.all([
    registerReconcileSchedule(ctx.queues, connection, prefix, cron, logger, draining.signal).catch(
      failed('the reconciliation schedule'),
    ),
    schedulePruning(ctx.queues, config.events.retentionDays).catch(failed('the event pruning')),
  ]);
  const opsPort = (server.address() as AddressInfo).port;
  logger.info(
    {
      port: opsPort,
      dashboard: settings.dashboardPassword ? dashboardPath : 'off',
      tracing: tracing ? 'on' : 'off',
      perksApi:
        minted === undefined
          ? 'stopping: mint not awaited'
          : minted
            ? 'token minted'
            : 'token mint failing',
      clientId: perks.clientId,
      intake: intake.summary,
      webhooks: webhooks ? new URL(config.events.webhookUrl ?? '').host : 'off',
      prefix,
      enrollConcurrency: settings.enrollConcurrency,
      syncConcurrency: settings.syncConcurrency,
    },
    'worker started',
  );
  const close = async () => {
    // /readyz says so from the first moment: no balancer sends signups to a closing intake.
    draining.abort();
    // Together: every door stops taking work at once (a job worker taking new jobs while the
    // intake closed would overrun the grace period), and their waits overlap.
    const [stopped] = await Promise.all([
      worker.close(settings.shutdownTimeoutMs),
      intake.close(),
      webhooks?.close(),
    ]);
    // Done in milliseconds at the start, unless Redis was away since: then it never settles.
    await within(1000, scheduled);
    await closeServer(server);
    await runtime.close();
    await stopTracing(tracing);
    return stopped;
  };
  return { runtime, worker, intake, webhooks, tracing, opsPort, close };
}

/** Bounded: a collector that is down must not hold the exit past the grace period. */
const stopTracing = async (tracing: Tracing | undefined) =>
  tracing && (await within(5000, tracing.shutdown()));

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
  draining: AbortSignal,
): Promise<{ intake: Intake; server: Server }> {
  const { ctx, connection, metrics, mintOutage } = runtime;
  const { port, opsHost: host, dashboardUser: user, dashboardPassword: password } = config.worker;
  let intake: Intake | undefined;
  try {
    intake = await startIntake(config, { pool: ctx.store.pool, logger, metrics, tracing });
    const routes = password
      ? await createDashboard({ queues: Object.values(ctx.queues), user, password })
      : undefined;
    const checks = [
      { name: 'redis', check: () => pingQueueStore(connection, config.redis.queuePrefix) },
      { name: 'postgres', check: () => ctx.store.ping() },
      { name: 'perks api', check: () => mintOutage.check() },
      ...intake.checks,
    ];
    const { registry } = metrics;
    const ops = { port, host, logger, checks, registry, routes, draining };
    const server = await startOpsServer(ops);
    return { intake, server };
  } catch (error) {
    await intake?.close();
    await runtime.close();
    await stopTracing(tracing);
    const at = { portVariable: 'PORT', port, hostVariable: 'OPS_HOST', host };
    throw listenFailure(error, at) ?? error;
  }
}

/**
 * Postgres may still be starting (compose, k8s): the migration is tried again for a minute,
 * or until a stop signal.
 */
async function migrateWithRetry(
  database: Config['database'],
  logger: Logger,
  stopping: Promise<unknown> = new Promise(() => {}),
): Promise<void> {
  const stopped = stopping.then(() => true);
  const deadline = Date.now() + 60_000;
  const databaseUrl = database.directUrl ?? database.url;
  for (let attempt = 1; ; attempt++) {
    try {
      const { applied, current } = await migrate({ databaseUrl, schema: database.schema, logger });
      if (applied.length > 0) logger.info({ applied, current }, 'migrations applied');
      return;
    } catch (error) {
      const permanent =
        error instanceof MigrationChecksumError ||
        error instanceof MigrationFileError ||
        (error instanceof MigrationRefusedError && error.permanent);
      if (permanent || Date.now() > deadline) throw error;
      const err = { message: (error as Error).message };
      logger.warn({ attempt, err }, 'cannot migrate yet; retrying');
      const pause = sleep(Math.min(1000 * attempt, 5000), false);
      if (await Promise.race([pause, stopped])) throw new StoppedBeforeStartError();
    }
  }
}
