/**
 * `perks-worker demo`: the whole job against an in-process sandbox, on the local Redis and
 * PostgreSQL, with no credentials: migrate, enroll a batch of customers, sync their rewards,
 * change some statuses upstream and reconcile, then print what Postgres holds. It writes to
 * its own schema (<DATABASE_SCHEMA>_demo) and queue prefix (<QUEUE_PREFIX>-demo), reset at
 * each run, and runs the worker `work` runs, with its ops server on a free port and no
 * intake, webhooks or schedule.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { startPerksWorker } from '../app.js';
import { configGroups, loadConfig, redactUrl as redact } from '../config.js';
import type { JobContext } from '../jobs/context.js';
import { createLogger } from '../ops/logger.js';
import { connected, createRedisConnection, deletePrefix } from '../queues/connection.js';
import { deriveConsumerId } from '../queues/consumer-id.js';
import { failedJobs, lastReconciliation, queueCounts } from '../queues/inspect.js';
import { enqueueEnrollment, startReconciliation } from '../queues/producer.js';
import { type Sandbox, startSandbox } from '../sandbox/index.js';
import { migrate } from '../store/migrate.js';
import { consumerFailures, readSummary } from '../store/summary.js';
import { datastoreBlock, failuresBlock, reconciliationBlock } from './report.js';

export interface DemoOptions {
  /** Customers to enroll, 1 to 100000. Default 200. */
  customers?: number;
  /** Seed of the sandbox data, 1 to 1000000. Default 7. */
  seed?: number;
  /** Print the worker's log lines (JSON) too. */
  verbose?: boolean;
}

/** A demo-only HMAC key: the demo's consumers live in the demo's own sandbox and schema. */
const demoConsumerIdKey = 'perks-worker-demo-key-not-for-production';

const say = (line: string) => process.stdout.write(`${line}\n`);

// `| readonly string[]`: until the commander CLI (index.ts) passes typed options.
export async function run(given: DemoOptions | readonly string[]): Promise<number> {
  const { customers = 200, seed = 7, verbose } = isArgv(given) ? fromArgv(given) : given;
  const base = loadConfig(['redis', 'database', 'log']);
  // The worker's own lines (retries, pages) would drown the progress: shown with --verbose.
  const logger = createLogger({ ...base.log, level: verbose ? base.log.level : 'error' });
  const started = performance.now();
  const schema = `${base.database.schema}_demo`.slice(0, 63);
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
    .finally(() => redis.disconnect());
  const migrated = await migrate({
    databaseUrl: base.database.directUrl ?? base.database.url,
    schema,
    logger,
  });
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
    PERKS_BASE_URL: sandbox.baseUrl,
    PERKS_INSECURE_HTTP: '',
    PERKS_CLIENT_ID: sandbox.clientId,
    PERKS_CLIENT_SECRET: sandbox.clientSecret,
    PERKS_API_VERSION: '',
    PERKS_TIMEOUT_MS: '2000',
    PERKS_RETRY_ATTEMPTS: '4',
    PERKS_RETRY_MAX_MS: '10000',
    PERKS_CONNECTIONS: '16',
    PERKS_CONSUMER_ID_KEY: demoConsumerIdKey,
    PERKS_RATE_LIMIT_PER_SECOND: '',
    PERKS_RECONCILE_CRON: 'off',
    QUEUE_PREFIX: prefix,
    DATABASE_SCHEMA: schema,
    JOB_BACKOFF_MS: '200',
    PORT: '0',
    OPS_HOST: '127.0.0.1',
    DASHBOARD_PASSWORD: '',
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
  for (const block of [
    reconciliationBlock(reconciled),
    datastoreBlock(summary),
    failuresBlock(jobs, consumers),
  ]) {
    say('');
    say(block);
  }
  say('');
  say(
    `upstream sandbox: ${upstream.enrollmentsCreated} enrollments created, ${upstream.enrollmentsConflicted} answered 409, ${upstream.tokensMinted} token(s) minted`,
  );
  for (const line of differences({ ...changed, created: upstream.enrollmentsCreated }, summary))
    say(line);
}

const isArgv = (given: object): given is readonly string[] => Array.isArray(given);

function fromArgv(argv: readonly string[]): DemoOptions {
  const { values } = parseArgs({
    args: [...argv],
    options: {
      customers: { type: 'string' },
      seed: { type: 'string' },
      verbose: { type: 'boolean', short: 'v' },
    },
  });
  return {
    ...(values.customers ? { customers: Number(values.customers) } : {}),
    ...(values.seed ? { seed: Number(values.seed) } : {}),
    ...(values.verbose ? { verbose: true } : {}),
  };
}

/** Customer ids as a client's systems have them: some are valid consumer ids, some are not. */
function demoUserIds(count: number): string[] {
  return Array.from({ length: count }, (_, i) =>
    i % 3 === 0 ? `customer-${String(i + 1).padStart(5, '0')}` : `user${i + 1}@example.com`,
  );
}

/**
 * Upstream before the worker runs: each customer has rewards waiting (the sandbox shows them
 * once enrolled); one in twenty is already enrolled (409); one has 2,500 rewards (3 pages).
 */
function seedUpstream(sandbox: Sandbox, consumerIds: readonly string[]): void {
  consumerIds.forEach((id, i) => {
    const rewards = i === 1 ? 2500 : (i * 37) % 60;
    sandbox.state.addConsumer(id, { enrolled: i % 20 === 5, rewards });
  });
  const [first, second] = consumerIds;
  if (first) {
    sandbox.faults.inject({
      route: 'enroll',
      consumerId: first,
      count: 1,
      kind: 'delay',
      delayMs: 3500,
      applyWrite: true,
    });
  }
  if (second) {
    sandbox.faults.inject({ route: 'listRewards', consumerId: second, count: 1, kind: 'html502' });
  }
  sandbox.faults.inject({ route: 'listRewards', count: 2, kind: 'status', status: 500 });
  sandbox.faults.inject({
    route: 'listRewards',
    count: 1,
    kind: 'throttle429',
    retryAfterSeconds: 2,
  });
}

/**
 * Moves about a fifth of the VALIDATED rewards to PAID_IN and removes a few, upstream. A
 * reward can be both moved and removed: the re-sync never sees its new status.
 */
function moveStatuses(
  sandbox: Sandbox,
  consumerIds: readonly string[],
): { moved: number; removed: number; movedAndRemoved: number } {
  const moved = new Set<string>();
  for (const id of consumerIds) {
    const rewards = sandbox.state.rewardsOf(id) as { id: string; status: string }[];
    for (const [i, reward] of rewards.entries()) {
      if (reward.status === 'VALIDATED' && i % 5 === 0) {
        sandbox.state.setRewardStatus(id, reward.id, 'PAID_IN');
        moved.add(reward.id);
      }
    }
  }
  let removed = 0;
  let movedAndRemoved = 0;
  for (const id of consumerIds.slice(2, 5)) {
    const [reward] = sandbox.state.rewardsOf(id) as { id: string }[];
    if (!reward) continue;
    sandbox.state.removeReward(id, reward.id);
    removed += 1;
    if (moved.has(reward.id)) movedAndRemoved += 1;
  }
  return { moved: moved.size, removed, movedAndRemoved };
}

/** Why the datastore's figures and upstream's differ, in this demo by design. */
function differences(
  upstream: { moved: number; movedAndRemoved: number; created: number },
  datastore: { statusChanges: number; enrolledCreated: number },
): string[] {
  const lines: string[] = [];
  if (upstream.movedAndRemoved > 0) {
    lines.push(
      `  - ${upstream.moved} rewards moved upstream, ${datastore.statusChanges} status changes recorded: ${upstream.movedAndRemoved} moved reward(s) were also removed before the re-sync read them, so they show as missing upstream, not as a change.`,
    );
  }
  const lateCreates = upstream.created - datastore.enrolledCreated;
  if (lateCreates > 0) {
    lines.push(
      `  - upstream created ${upstream.created} consumers, the datastore says ${datastore.enrolledCreated} created: ${lateCreates} POST /perks/consumers timed out after the API had applied it; the retry got 409, which counts as success, so the consumer is recorded as already enrolled.`,
    );
  }
  return lines.length > 0
    ? ['two honest differences between upstream and the datastore:', ...lines]
    : [];
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
    const { rows } = await ctx.store.pool.query<{ n: string }>(
      `select count(*) as n from "${ctx.store.schema}".rewards`,
    );
    const line = `   enrollments done ${enroll.completed} (failed ${enroll.failed}), sync jobs done ${sync.completed} (failed ${sync.failed}), pending jobs ${pending}, rewards stored ${rows[0]?.n ?? 0}`;
    if (tty) process.stdout.write(`\r${line}`);
    else if (line !== lastLine) say(line);
    lastLine = line;
    const reconciling = reconciliationJobId
      ? !(await ctx.queues.reconciliation.getJob(reconciliationJobId).then((j) => j?.finishedOn))
      : false;
    if (pending === 0 && !reconciling) break;
  }
  if (tty) process.stdout.write('\n');
}

async function resetSchema(databaseUrl: string, schema: string): Promise<void> {
  const client = new pg.Client({ connectionString: databaseUrl });
  try {
    await client.connect();
  } catch {
    return; // the database does not exist yet: migrate creates it
  }
  try {
    await client.query(`drop schema if exists "${schema}" cascade`);
  } finally {
    await client.end();
  }
}
