import { type Config, loadConfig, redactUrl } from '../config.js';
import { type MintFailure, readMintFailure } from '../jobs/mint-outage.js';
import {
  type CountedState,
  type FailedJob,
  failedJobs,
  jobSubject,
  lastReconciliation,
  queueCounts,
  type ReconciliationView,
  retryingJobs,
} from '../queues/inspect.js';
import type { QueueKind } from '../queues/names.js';
import type { Producer } from '../queues/producer.js';
import { type DeliveryLag, deliveryLag } from '../store/event-deliveries.js';
import { quoteIdentifier } from '../store/identifier.js';
import { createStore } from '../store/store.js';
import {
  type ConsumerFailure,
  consumerFailures,
  type DatastoreSummary,
  readSummary,
} from '../store/summary.js';
import { withProducer } from './producer-session.js';
import {
  datastoreBlock,
  failuresBlock,
  lagLine,
  mintFailureLine,
  queuesBlock,
  reconciliationBlock,
  retryingBlock,
} from './report.js';

export interface StatusOptions {
  json?: boolean;
}

type StatusConfig = Pick<Config, 'redis' | 'database' | 'events'>;

interface Status {
  mintFailure: MintFailure | undefined;
  queues: Record<QueueKind, Record<CountedState, number>>;
  reconciliation: ReconciliationView | undefined;
  retrying: FailedJob[];
  failedJobs: FailedJob[];
  /** Undefined with `datastoreError` when the datastore cannot be read. */
  datastore?: { summary: DatastoreSummary; consumerFailures: ConsumerFailure[]; lag: DeliveryLag };
  datastoreError?: string;
}

export async function run(options: StatusOptions): Promise<number> {
  const config = loadConfig(['redis', 'database', 'events']);
  return withProducer(async (producer) => {
    const status = await gather(producer, config);
    process.stdout.write(
      options.json
        ? `${JSON.stringify(toJson(status, config), null, 2)}\n`
        : `${render(status, config)}\n`,
    );
    return healthy(status) ? 0 : 1;
  });
}

/** What the exit status and `ok` say: the datastore answered and minting works. */
const healthy = (s: Status): boolean => s.datastore !== undefined && !s.mintFailure;

async function gather(producer: Producer, config: StatusConfig): Promise<Status> {
  const tallies = { redis: producer.connection, prefix: config.redis.queuePrefix };
  const [queues, reconciliation, failed, retrying, mintFailure] = await Promise.all([
    queueCounts(producer.queues),
    lastReconciliation(producer.queues, tallies),
    failedJobs(producer.queues, 5),
    retryingJobs(producer.queues, 5),
    readMintFailure(producer.connection, config.redis.queuePrefix),
  ]);
  const status: Status = { mintFailure, queues, reconciliation, retrying, failedJobs: failed };
  const store = createStore(config.database);
  try {
    const [summary, consumers, lag] = await Promise.all([
      readSummary(store.pool, config.database.schema),
      consumerFailures(store.pool, config.database.schema, 5),
      deliveryLag(store.pool, quoteIdentifier(config.database.schema)),
    ]);
    status.datastore = { summary, consumerFailures: consumers, lag };
  } catch (error) {
    // The queues are still worth showing when the datastore is not.
    const code = (error as { code?: string }).code;
    status.datastoreError =
      code === '42P01' || code === '3F000'
        ? `schema ${config.database.schema} is not migrated: run perks-worker migrate`
        : (error as Error).message;
  } finally {
    await store.close();
  }
  return status;
}

function render(s: Status, config: StatusConfig): string {
  const out = [
    ...(s.mintFailure ? [mintFailureLine(s.mintFailure), ''] : []),
    `queues (prefix ${config.redis.queuePrefix}; completed and failed count the jobs kept, see KEEP_COMPLETED_JOBS and KEEP_FAILED_JOBS)`,
    queuesBlock(s.queues),
    '',
    reconciliationBlock(s.reconciliation),
    '',
    retryingBlock(s.retrying),
    '',
  ];
  if (s.datastore) {
    out.push(
      datastoreBlock(s.datastore.summary),
      '',
      lagLine(s.datastore.lag, config.events.webhookUrl !== undefined),
      '',
      failuresBlock(s.failedJobs, s.datastore.consumerFailures),
    );
  } else {
    out.push(
      `datastore ${redactUrl(config.database.url)}: unavailable (${s.datastoreError})`,
      '',
      failuresBlock(s.failedJobs, []),
    );
  }
  return out.join('\n');
}

const jobJson = ({ queue, job }: FailedJob) => ({
  queue,
  jobId: job.id ?? '',
  consumer: jobSubject(job.data),
  attempts: job.attemptsMade,
  reason: job.failedReason ?? '',
});

function toJson(s: Status, config: StatusConfig) {
  return {
    ok: healthy(s),
    perksApi: { mintFailure: s.mintFailure ?? null },
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
    failures: {
      jobs: s.failedJobs.map(jobJson),
      consumers: s.datastore?.consumerFailures ?? [],
    },
  };
}
