import { type Config, loadConfig, redactUrl } from '../config.js';
import { readMintFailures } from '../jobs/mint-outage.js';
import {
  apiQueuesHeldMs,
  failedJobs,
  lastReconciliation,
  queueCounts,
  retryingJobs,
} from '../queues/inspect.js';
import type { Producer } from '../queues/producer.js';
import { datastoreProblem } from '../store/errors.js';
import { deliveryLag } from '../store/event-deliveries.js';
import { quoteIdentifier } from '../store/identifier.js';
import { createStore } from '../store/store.js';
import { consumerFailures, readSummary } from '../store/summary.js';
import { withProducer } from './producer-session.js';
import {
  datastoreBlock,
  failuresBlock,
  jobJson,
  lagLine,
  mintFailureLine,
  queuesBlock,
  reconciliationBlock,
  retryingBlock,
  say,
} from './report.js';

type StatusConfig = Pick<Config, 'redis' | 'database' | 'events'>;
type Status = Awaited<ReturnType<typeof gather>>;

export async function run(options: { json?: boolean }): Promise<number> {
  const config = loadConfig(['redis', 'database', 'events']);
  return withProducer(async (producer) => {
    const status = await gather(producer, config);
    say(options.json ? JSON.stringify(toJson(status, config), null, 2) : render(status, config));
    return healthy(status) ? 0 : 1;
  });
}

/** What the exit status and `ok` say: the datastore answered and no replica's mint fails. */
const healthy = (s: Status): boolean => s.datastore !== undefined && s.mintFailures.length === 0;

/** The queues, and the datastore when it can be read (`datastoreError` says why not). */
async function gather(producer: Producer, config: StatusConfig) {
  const { queuePrefix: prefix } = config.redis;
  const { schema } = config.database;
  const [queues, reconciliation, failed, retrying, mintFailures, heldMs] = await Promise.all([
    queueCounts(producer.queues),
    lastReconciliation(producer.queues, { redis: producer.connection, prefix }),
    failedJobs(producer.queues, 5),
    retryingJobs(producer.queues, 5),
    readMintFailures(producer.connection, prefix),
    apiQueuesHeldMs(producer.queues),
  ]);
  // When a 429's hold of the API queues ends; undefined when they are not held.
  const heldUntil = heldMs > 0 ? new Date(Date.now() + heldMs) : undefined;
  const status = { mintFailures, heldUntil, queues, reconciliation, retrying, failedJobs: failed };
  const store = createStore(config.database);
  try {
    const [summary, consumers, lag] = await Promise.all([
      readSummary(store.pool, schema),
      consumerFailures(store.pool, schema, 5),
      deliveryLag(store.pool, quoteIdentifier(schema)),
    ]);
    return { ...status, datastore: { summary, consumerFailures: consumers, lag } };
  } catch (error) {
    return { ...status, datastore: undefined, datastoreError: datastoreProblem(error, schema) };
  } finally {
    await store.close();
  }
}

function render(s: Status, config: StatusConfig): string {
  const datastore = s.datastore
    ? [
        datastoreBlock(s.datastore.summary),
        lagLine(s.datastore.lag, config.events.webhookUrl !== undefined),
        failuresBlock(s.failedJobs, s.datastore.consumerFailures),
      ]
    : [
        `datastore ${redactUrl(config.database.url)}: unavailable (${s.datastoreError})`,
        failuresBlock(s.failedJobs, []),
      ];
  return [
    ...(s.mintFailures.length > 0 ? [s.mintFailures.map(mintFailureLine).join('\n')] : []),
    ...(s.heldUntil ? [heldLine(s.heldUntil)] : []),
    `queues (prefix ${config.redis.queuePrefix}; completed and failed count the jobs kept, see KEEP_COMPLETED_JOBS and KEEP_FAILED_JOBS)\n${queuesBlock(s.queues)}`,
    reconciliationBlock(s.reconciliation),
    retryingBlock(s.retrying),
    ...datastore,
  ].join('\n\n');
}

const heldLine = (until: Date) =>
  `perks api: THROTTLED (429): the enrollment and reward-sync queues of every replica are held for another ${Math.ceil((until.getTime() - Date.now()) / 1000)} s (until ${until.toISOString()}); their jobs wait, no attempt spent`;

function toJson(s: Status, config: StatusConfig) {
  return {
    ok: healthy(s),
    perksApi: {
      mintFailures: s.mintFailures,
      heldUntil: s.heldUntil?.toISOString() ?? null,
    },
    queuePrefix: config.redis.queuePrefix,
    queues: s.queues,
    reconciliation: s.reconciliation ?? null,
    retrying: s.retrying.map(jobJson),
    datastore: s.datastore
      ? { ok: true, ...s.datastore.summary }
      : { ok: false, error: s.datastoreError },
    webhooks: {
      enabled: config.events.webhookUrl !== undefined,
      ...(s.datastore
        ? {
            consumersWaiting: s.datastore.lag.consumers,
            oldestUndelivered: s.datastore.lag.oldest ?? null,
            failed: s.datastore.lag.failed,
          }
        : {}),
    },
    failures: { jobs: s.failedJobs.map(jobJson), consumers: s.datastore?.consumerFailures ?? [] },
  };
}
