/** `perks-worker demo`: `work` against an in-process sandbox; see its help in program.ts. */
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { startPerksWorker } from '../app.js';
import { configGroups, loadConfig, redactUrl as redact } from '../config.js';
import type { JobContext } from '../jobs/context.js';
import { createLogger } from '../ops/logger.js';
import { deriveConsumerId } from '../queues/consumer-id.js';
import { failedJobs, lastReconciliation, queueCounts } from '../queues/inspect.js';
import { enqueueEnrollment, startReconciliation } from '../queues/producer.js';
import { connected, createRedisConnection, deletePrefix } from '../redis/connection.js';
import { type Sandbox, sandboxApiEnv, startSandbox } from '../sandbox/index.js';
import { migrate } from '../store/migrate.js';
import { consumerFailures, readSummary } from '../store/summary.js';
import { demoUserIds, differences, moveStatuses, seedUpstream } from './demo-upstream.js';
import { redisUnreachable } from './producer-session.js';
import { datastoreBlock, failuresBlock, reconciliationBlock, say } from './report.js';

/** A demo-only HMAC key: the demo's consumers live in the demo's own sandbox and schema. */
const demoConsumerIdKey = 'perks-worker-demo-key-not-for-production';

/** Commander's options: program.ts checks the ranges and gives the defaults. */
export async function run(options: {
  customers: number;
  seed: number;
  verbose?: boolean;
}): Promise<number> {
  const { customers, seed, verbose } = options;
  const base = loadConfig(['redis', 'database', 'log']);
  // The worker's own lines (retries, pages) would drown the progress: shown with --verbose.
  const logger = createLogger({ ...base.log, level: verbose ? base.log.level : 'error' });
  const started = performance.now();
  const schema = demoSchemaOf(base.database.schema);
  const prefix = `${base.redis.queuePrefix}-demo`;
  say(`perks-worker demo: ${customers} customers, sandbox seed ${seed}`);
  say(`  datastore ${redact(base.database.url)}, schema ${schema} (reset)`);
  say(`  redis ${redact(base.redis.url)}, queue prefix ${prefix} (reset)`);

  await resetSchema(base.database.url, schema);
  // Its queues, and the shared access token, which belongs to the previous run's sandbox (a
  // new sandbox signs with a new key, so that token would be refused with a 401).
  const redis = createRedisConnection(base.redis, 'producer', logger);
  await connected(redis)
    .then(() => deletePrefix(redis, prefix))
    .catch((error: unknown) => {
      throw redisUnreachable(base.redis.url, error);
    })
    .finally(() => redis.disconnect());
  const databaseUrl = base.database.directUrl ?? base.database.url;
  const migrated = await migrate({ databaseUrl, schema, logger });
  say(
    `1. migrated: ${migrated.databaseCreated ? 'database created, ' : ''}${migrated.applied.length} migration(s) applied, schema at ${migrated.current}`,
  );

  const sandbox = await startSandbox({ seed, logger });
  const userIds = demoUserIds(customers);
  const consumerIds = userIds.map((u) => deriveConsumerId(u, demoConsumerIdKey));
  seedUpstream(sandbox, consumerIds);
  say(
    `2. sandbox on ${sandbox.baseUrl}: ${consumerIds.length} customers with rewards waiting, ${Math.ceil(consumerIds.length / 20)} already enrolled upstream, faults armed (502 HTML, 500, text/plain 429, a POST that times out after being applied)`,
  );
  try {
    const config = loadConfig(configGroups, demoEnvironment(sandbox, schema, prefix));
    const app = await startPerksWorker(config, { logger, skipMigrate: true });
    try {
      await enrollReconcileAndReport(app.runtime.ctx, sandbox, userIds, consumerIds);
    } finally {
      await app.close();
    }
  } finally {
    await sandbox.close();
  }
  say(`elapsed: ${((performance.now() - started) / 1000).toFixed(1)} s`);
  say(`inspect it: psql ${redact(base.database.url)} -c 'select * from ${schema}.rewards limit 5'`);
  return 0;
}

/**
 * The operator's environment, pointed at the sandbox and the demo's schema and prefix, with
 * what the demo does not need switched off as an operator would (empty = unset).
 */
function demoEnvironment(sandbox: Sandbox, schema: string, prefix: string) {
  return {
    ...process.env,
    ...sandboxApiEnv(sandbox),
    PERKS_API_VERSION: '',
    PERKS_TIMEOUT_MS: '2000',
    PERKS_RETRY_ATTEMPTS: '4',
    PERKS_RETRY_MAX_MS: '10000',
    PERKS_CONNECTIONS: '16',
    PERKS_CONSUMER_ID_KEY: demoConsumerIdKey,
    PERKS_RATE_LIMIT_PER_SECOND: '',
    PERKS_RECONCILE_CRON: 'off',
    EVENT_RETENTION_DAYS: 'off',
    QUEUE_PREFIX: prefix,
    DATABASE_SCHEMA: schema,
    JOB_BACKOFF_MS: '200',
    PORT: '0',
    OPS_HOST: '127.0.0.1',
    OTEL_EXPORTER_OTLP_ENDPOINT: '',
    INTAKE_TOKEN: '',
    OUTBOX: 'off',
    INTAKE_AMQP_URL: '',
    WEBHOOK_URL: '',
    WEBHOOK_SECRET: '',
  };
}

/** Steps 3 and 4, then the summary read back from Postgres and the sandbox's counters. */
async function enrollReconcileAndReport(
  ctx: JobContext,
  sandbox: Sandbox,
  userIds: readonly string[],
  consumerIds: readonly string[],
): Promise<void> {
  for (const userId of userIds) await enqueueEnrollment(ctx.queues, { userId }, demoConsumerIdKey);
  say(
    `3. enqueued ${userIds.length} enrollments; the worker enrolls each customer, then syncs its rewards`,
  );
  await waitUntilDrained(ctx);
  const changed = moveStatuses(sandbox, consumerIds);
  say(
    `4. upstream: ${changed.moved} rewards moved VALIDATED -> PAID_IN, ${changed.removed} removed; reconciling every enrolled consumer, ${ctx.reconcile.consumersPerJob} to a sync job`,
  );
  const reconciliation = await startReconciliation(ctx.queues);
  await waitUntilDrained(ctx, reconciliation.jobId);

  const [summary, jobs, consumers, reconciled] = await Promise.all([
    readSummary(ctx.store.pool, ctx.store.schema),
    failedJobs(ctx.queues, 10),
    consumerFailures(ctx.store.pool, ctx.store.schema, 10),
    lastReconciliation(ctx.queues, ctx.tallies),
  ]);
  const upstream = sandbox.state.counters();
  const blocks = [
    reconciliationBlock(reconciled),
    datastoreBlock(summary),
    failuresBlock(jobs, consumers),
    `upstream sandbox: ${upstream.enrollmentsCreated} enrollments created, ${upstream.enrollmentsConflicted} answered 409, ${upstream.tokensMinted} token(s) minted`,
  ];
  const changes = { ...changed, created: upstream.enrollmentsCreated };
  say(...blocks.flatMap((block) => ['', block]), ...differences(changes, summary));
}

/** Prints progress until no job is waiting, delayed or running (and the reconciliation, if any, ended). */
async function waitUntilDrained(ctx: JobContext, reconciliationJobId?: string): Promise<void> {
  const tty = process.stdout.isTTY;
  let lastLine = '';
  for (;;) {
    await sleep(300);
    const counts = await queueCounts(ctx.queues);
    const pending = Object.values(counts).reduce(
      (n, c) => n + c.wait + c.prioritized + c.active + c.delayed,
      0,
    );
    const { enrollment: enroll, rewardSync: sync } = counts;
    // Done: counted by this process (the queues keep only the last KEEP_COMPLETED_JOBS).
    const done = await ctx.metrics.completedJobs();
    const { rows } = await ctx.store.pool.query<{ n: string }>(
      `select count(*) as n from "${ctx.store.schema}".rewards`,
    );
    const line = `   enrollments done ${done[ctx.queues.enrollment.name] ?? 0} (failed ${enroll.failed}), sync jobs done ${done[ctx.queues.rewardSync.name] ?? 0} (failed ${sync.failed}), pending jobs ${pending}, rewards stored ${rows[0]?.n ?? 0}`;
    if (tty) process.stdout.write(`\r${line}`);
    else if (line !== lastLine) say(line);
    lastLine = line;
    const reconciliation = reconciliationJobId
      ? await ctx.queues.reconciliation.getJob(reconciliationJobId)
      : undefined;
    if (pending === 0 && (!reconciliationJobId || reconciliation?.finishedOn)) break;
  }
  if (tty) process.stdout.write('\n');
}

async function resetSchema(databaseUrl: string, schema: string): Promise<void> {
  const client = new pg.Client({ connectionString: databaseUrl });
  try {
    await client.connect();
  } catch {
    return; // A database that does not exist yet has no schema to drop: migrate creates it.
  }
  await client.query(`drop schema if exists "${schema}" cascade`).finally(() => client.end());
}

/** The demo's schema, which it resets: never the configured one, within 63 characters. */
export function demoSchemaOf(schema: string): string {
  const demo = `${schema.slice(0, 58)}_demo`;
  return demo === schema ? `${schema.slice(0, 57)}_demo2` : demo;
}
