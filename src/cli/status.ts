import { type Config, loadConfig, redactUrl } from '../config.js';
import { readMintFailure } from '../jobs/mint-outage.js';
import { failedJobs, lastReconciliation, queueCounts, retryingJobs } from '../queues/inspect.js';
import type { Producer } from '../queues/producer.js';
import { deliveryLag } from '../store/event-deliveries.js';
import { quoteIdentifier } from '../store/identifier.js';
import { createStore } from '../store/store.js';
import { consumerFailures, readSummary } from '../store/summary.js';
import { type CommandSpec, parseCommandArgs } from './command.js';
import { withProducer } from './producer-session.js';
import {
  datastoreBlock,
  failuresBlock,
  lagLine,
  mintFailureLine,
  queuesBlock,
  reconciliationLine,
  retryingBlock,
} from './report.js';

const spec: CommandSpec = {
  name: 'status',
  summary:
    'Show a failing token mint, queue counts, the last reconciliation, jobs waiting to retry,\nthe datastore totals, the webhook delivery lag and recent failures. Exits 1 while minting fails or the datastore is\nunavailable.',
  options: {},
  help: [],
};

export async function run(argv: readonly string[]): Promise<number> {
  if (!parseCommandArgs(spec, argv)) return 0;
  const config = loadConfig(['redis', 'database', 'events']);
  return withProducer((producer) => report(producer, config));
}

async function report(
  producer: Producer,
  config: Pick<Config, 'redis' | 'database' | 'events'>,
): Promise<number> {
  const store = createStore(config.database);
  try {
    const [counts, reconciliation, jobs, retrying, mintFailure] = await Promise.all([
      queueCounts(producer.queues),
      lastReconciliation(producer.queues),
      failedJobs(producer.queues, 5),
      retryingJobs(producer.queues, 5),
      readMintFailure(producer.connection, config.redis.queuePrefix),
    ]);
    const out = [
      ...(mintFailure ? [mintFailureLine(mintFailure), ''] : []),
      `queues (prefix ${config.redis.queuePrefix})`,
      queuesBlock(counts),
      '',
      reconciliationLine(reconciliation),
      '',
      retryingBlock(retrying),
      '',
    ];
    let datastoreOk = true;
    try {
      const [summary, consumers, lag] = await Promise.all([
        readSummary(store.pool, config.database.schema),
        consumerFailures(store.pool, config.database.schema, 5),
        deliveryLag(store.pool, quoteIdentifier(config.database.schema)),
      ]);
      out.push(
        datastoreBlock(summary),
        '',
        lagLine(lag, config.events.webhookUrl !== undefined),
        '',
        failuresBlock(jobs, consumers),
      );
    } catch (error) {
      // The queues are still worth showing when the datastore is not.
      datastoreOk = false;
      const code = (error as { code?: string }).code;
      const reason =
        code === '42P01' || code === '3F000'
          ? `schema ${config.database.schema} is not migrated: run perks-worker migrate`
          : (error as Error).message;
      out.push(
        `datastore ${redactUrl(config.database.url)}: unavailable (${reason})`,
        '',
        failuresBlock(jobs, []),
      );
    }
    process.stdout.write(`${out.join('\n')}\n`);
    return datastoreOk && !mintFailure ? 0 : 1;
  } finally {
    await store.close();
  }
}
