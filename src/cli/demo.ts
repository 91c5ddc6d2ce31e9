/**
 * `perks-worker demo`: the whole job against an in-process sandbox, on the local Redis and
 * PostgreSQL, with no credentials. It writes to its own schema and queue prefix (reset at
 * each run), never to the production ones, and ends with a summary read back from Postgres.
 */
import pg from 'pg';
import { loadConfig, redactUrl as redact } from '../config.js';
import type { JobContext } from '../jobs/context.js';
import { createRuntime, type RuntimeConfig } from '../jobs/runtime.js';
import { startWorker } from '../jobs/worker.js';
import { createLogger } from '../ops/logger.js';
import { deletePrefix } from '../queues/connection.js';
import { deriveConsumerId } from '../queues/consumer-id.js';
import { failedJobs, lastReconciliation, queueCounts } from '../queues/inspect.js';
import { enqueueEnrollment, startReconciliation } from '../queues/producer.js';
import { startSandbox } from '../sandbox/index.js';
import { migrate } from '../store/migrate.js';
import { consumerFailures, readSummary } from '../store/summary.js';
import { type CommandSpec, parseCommandArgs, wholeNumberOption } from './command.js';
import { datastoreBlock, failuresBlock, reconciliationBlock } from './report.js';

const spec = {
  name: 'demo',
  config: ['redis', 'database', 'worker', 'events', 'log'],
  summary:
    'Run the whole job against a built-in sandbox: migrate, enroll a batch of customers, sync\ntheir rewards, change some statuses upstream and reconcile, then print what Postgres holds.\nNeeds only Redis and PostgreSQL (REDIS_URL, DATABASE_URL). Uses its own schema\n(<DATABASE_SCHEMA>_demo) and queue prefix (<QUEUE_PREFIX>-demo), reset at each run.',
  options: {
    customers: { type: 'string' },
    seed: { type: 'string' },
    verbose: { type: 'boolean', short: 'v' },
  },
  help: [
    '--customers N          customers to enroll (default 200, 1 to 100000)',
    '--seed N               seed of the sandbox data (default 7)',
    '-v, --verbose          print the worker log lines (JSON) too',
  ],
} satisfies CommandSpec;

/** A demo-only HMAC key: the demo's consumers live in the demo's own sandbox and schema. */
const demoConsumerIdKey = 'perks-worker-demo-key-not-for-production';

export async function run(argv: readonly string[]): Promise<number> {
  const args = parseCommandArgs(spec, argv);
  if (!args) return 0;
  const { values } = args;
  const customers = wholeNumberOption(spec, values.customers, '--customers', 1, 100_000) ?? 200;
  const seed = wholeNumberOption(spec, values.seed, '--seed', 1, 1_000_000) ?? 7;
  const base = loadConfig(['redis', 'database', 'worker', 'events', 'log']);
  // The worker's own lines (retries, pages) would drown the progress: shown with --verbose.
  const logger = createLogger({
    level: values.verbose ? base.log.level : 'error',
    format: base.log.format,
  });
  const say = (line: string) => process.stdout.write(`${line}\n`);
  const started = performance.now();

  const schema = `${base.database.schema}_demo`.slice(0, 63);
  const prefix = `${base.redis.queuePrefix}-demo`;
  say(`perks-worker demo: ${customers} customers, sandbox seed ${seed}`);
  say(`  datastore ${redact(base.database.url)}, schema ${schema} (reset)`);
  say(`  redis ${redact(base.redis.url)}, queue prefix ${prefix} (reset)`);

  await resetSchema(base.database.url, schema);
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

  const config: RuntimeConfig = {
    perks: {
      baseUrl: sandbox.baseUrl,
      clientId: sandbox.clientId,
      clientSecret: sandbox.clientSecret,
      apiVersion: '2.0.0',
      timeoutMs: 2000,
      retryAttempts: 4,
      retryMaxMs: 10_000,
      connections: 16,
    },
    consumerIds: { key: demoConsumerIdKey },
    redis: { ...base.redis, queuePrefix: prefix },
    database: { ...base.database, schema },
    worker: { ...base.worker, jobBackoffMs: 200, rateLimitPerSecond: undefined },
    events: base.events,
  };
  const runtime = createRuntime(config, logger);
  try {
    // Its queues, and the shared access token, which belongs to the previous run's sandbox (a
    // new sandbox signs with a new key, so that token would be refused with a 401).
    await deletePrefix(runtime.connection, prefix);
    const worker = startWorker(runtime.ctx, runtime.connection, prefix, config.worker);
    try {
      for (const userId of userIds)
        await enqueueEnrollment(runtime.ctx.queues, { userId }, demoConsumerIdKey);
      say(
        `3. enqueued ${userIds.length} enrollments; the worker enrolls each customer, then syncs its rewards`,
      );
      await waitUntilDrained(runtime.ctx, say);

      const changed = moveStatuses(sandbox, consumerIds);
      say(
        `4. upstream: ${changed.moved} rewards moved VALIDATED -> PAID_IN, ${changed.removed} removed; reconciling every enrolled consumer, ${runtime.ctx.reconcile.consumersPerJob} to a sync job`,
      );
      const reconciliation = await startReconciliation(runtime.ctx.queues);
      await waitUntilDrained(runtime.ctx, say, reconciliation.jobId);

      const [summary, jobs, consumers, reconciled] = await Promise.all([
        readSummary(runtime.ctx.store.pool, schema),
        failedJobs(runtime.ctx.queues, 10),
        consumerFailures(runtime.ctx.store.pool, schema, 10),
        lastReconciliation(runtime.ctx.queues, runtime.ctx.tallies),
      ]);
      const upstream = sandbox.state.counters();
      say('');
      say(reconciliationBlock(reconciled));
      say('');
      say(datastoreBlock(summary));
      say('');
      say(failuresBlock(jobs, consumers));
      say('');
      say(
        `upstream sandbox: ${upstream.enrollmentsCreated} enrollments created, ${upstream.enrollmentsConflicted} answered 409, ${upstream.tokensMinted} token(s) minted`,
      );
      for (const line of differences(
        { ...changed, created: upstream.enrollmentsCreated },
        summary,
      )) {
        say(line);
      }
      say(`elapsed: ${((performance.now() - started) / 1000).toFixed(1)} s`);
      say(
        `inspect it: psql ${redact(base.database.url)} -c 'select * from ${schema}.rewards limit 5'`,
      );
    } finally {
      await worker.close(5000);
    }
  } finally {
    await runtime.close();
    await sandbox.close();
  }
  return 0;
}

/** Customer ids as a client's systems have them: some are valid consumer ids, some are not. */
function demoUserIds(count: number): string[] {
  return Array.from({ length: count }, (_, i) =>
    i % 3 === 0 ? `customer-${String(i + 1).padStart(5, '0')}` : `user${i + 1}@example.com`,
  );
}

type DemoSandbox = Awaited<ReturnType<typeof startSandbox>>;

/**
 * Upstream before the worker runs: each customer has rewards waiting (the sandbox shows them
 * once enrolled); one in twenty is already enrolled (409); one has 2,500 rewards (3 pages).
 */
function seedUpstream(sandbox: DemoSandbox, consumerIds: readonly string[]): void {
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
  sandbox: DemoSandbox,
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
async function waitUntilDrained(
  ctx: JobContext,
  say: (line: string) => void,
  reconciliationJobId?: string,
): Promise<void> {
  const tty = process.stdout.isTTY;
  let lastLine = '';
  for (;;) {
    await new Promise((r) => setTimeout(r, 300));
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
