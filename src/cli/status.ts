import { loadConfig } from '../config.js';
import { createLogger } from '../ops/logger.js';
import { failedJobs, lastReconciliation, queueCounts } from '../queues/inspect.js';
import { createProducer } from '../queues/producer.js';
import { createStore } from '../store/store.js';
import { consumerFailures, readSummary } from '../store/summary.js';
import { type CommandSpec, parseCommandArgs, usage } from './command.js';
import { redactUrl } from './producer-session.js';
import { datastoreBlock, failuresBlock, queuesBlock, reconciliationLine } from './report.js';

const spec: CommandSpec = {
  name: 'status',
  summary: 'Show queue counts, the last reconciliation, the datastore totals and recent failures.',
  options: { help: { type: 'boolean', short: 'h' } },
  help: [],
};

export async function run(argv: readonly string[]): Promise<number> {
  const { values } = parseCommandArgs(spec, argv);
  if (values.help) {
    process.stdout.write(`${usage(spec)}\n`);
    return 0;
  }
  const config = loadConfig(['redis', 'database', 'log']);
  const logger = createLogger(config.log);
  const producer = await createProducer({
    redisUrl: config.redis.url,
    queuePrefix: config.redis.queuePrefix,
    logger,
  }).catch((error: unknown) => {
    throw new Error(
      `cannot reach Redis at ${redactUrl(config.redis.url)}: ${(error as Error).message}`,
    );
  });
  const store = createStore(config.database);
  try {
    const [counts, reconciliation, jobs, summary, consumers] = await Promise.all([
      queueCounts(producer.queues),
      lastReconciliation(producer.queues),
      failedJobs(producer.queues, 5),
      readSummary(store.pool, config.database.schema),
      consumerFailures(store.pool, config.database.schema, 5),
    ]);
    const out = [
      `queues (prefix ${config.redis.queuePrefix})`,
      queuesBlock(counts),
      '',
      reconciliationLine(reconciliation),
      '',
      datastoreBlock(summary),
      '',
      failuresBlock(jobs, consumers),
    ];
    process.stdout.write(`${out.join('\n')}\n`);
    return 0;
  } finally {
    await producer.close();
    await store.close();
  }
}
