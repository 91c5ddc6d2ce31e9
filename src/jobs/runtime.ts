/** What a worker process runs on: API client, store, Redis, queues, metrics; `close` frees all. */
import type { Telemetry } from 'bullmq';
import type { Config } from '../config.js';
import type { Logger } from '../ops/logger.js';
import { createMetrics } from '../ops/metrics.js';
import { within } from '../ops/timeouts.js';
import { PerksClient } from '../perks/client.js';
import { closeQueues, openQueues } from '../queues/queues.js';
import { createRedisConnection } from '../redis/connection.js';
import { credentialsName, RedisTokenCache } from '../redis/token-cache.js';
import { createStore } from '../store/store.js';
import type { JobContext } from './context.js';
import { credentialSource } from './credentials.js';
import { DatastoreOutage } from './datastore-outage.js';
import { MintOutage } from './mint-outage.js';
import { WorkerPauses } from './pauses.js';
import { fanOutConsumersPerJob, syncsInFlight } from './sync-rewards-batch.js';

export type Runtime = ReturnType<typeof createRuntime>;

export function createRuntime(
  config: Pick<
    Config,
    'perks' | 'consumerIds' | 'redis' | 'database' | 'jobs' | 'worker' | 'events'
  >,
  logger: Logger,
  options: { telemetry?: Telemetry } = {},
) {
  const { perks, redis } = config;
  const connection = createRedisConnection(redis, 'worker', logger);
  const writers = syncsInFlight(config.worker);
  const store = createStore(config.database, { logger, writers, eventTypes: config.events.types });
  const prefix = redis.queuePrefix;
  const queues = openQueues(connection, prefix, config.jobs, logger, options.telemetry);
  const metrics = createMetrics();
  metrics.watchQueues(Object.values(queues));
  metrics.watchRejectedRewards(store.countRejectedRewards);
  const credentials = credentialSource(perks, logger);
  // Tokens and mint failures are the credentials', which a rotation changes.
  const name = () => credentialsName({ ...perks, ...credentials.current() });
  const client = new PerksClient({
    ...perks,
    credentials,
    retry: { attempts: perks.retryAttempts, maxRetryTimeMs: perks.retryMaxMs },
    // One token an hour for all replicas, not one per replica.
    tokenCache: new RedisTokenCache({ redis: connection, prefix, name }),
    logger,
    hooks: metrics.apiHooks,
  });
  metrics.watchApiConcurrency(async () => client.concurrency.limit);
  const mint = () => client.checkCredentialsInUse();
  const pauses = new WorkerPauses();
  const outage = { redis: connection, prefix, logger, mint, credentials, name, pauses };
  const mintOutage = new MintOutage(outage);
  const datastoreOutage = new DatastoreOutage({ ping: store.ping, pauses, logger });
  const ctx: JobContext = {
    client,
    store,
    queues,
    tallies: { redis: connection, prefix },
    mintOutage,
    datastoreOutage,
    logger,
    reconcile: {
      batchSize: config.worker.reconcileBatchSize,
      maxPending: config.worker.reconcileMaxPending,
      consumersPerJob: fanOutConsumersPerJob(config.worker),
    },
    eventRetention: {
      days: config.events.retentionDays,
      keepUndelivered: config.events.webhookUrl !== undefined,
    },
    metrics,
  };
  return {
    ctx,
    connection,
    /** API hooks attached, queues watched; served on /metrics. */
    metrics,
    /** Mints at start (`probe`), pauses the API jobs while minting fails, backs /readyz. */
    mintOutage,
    /** Pauses every job of this replica while PostgreSQL is away. */
    datastoreOutage,
    /** SIGHUP: reads the credentials' files again; new ones are minted with at once. */
    async rereadCredentials(): Promise<void> {
      if (credentials.reread('SIGHUP')) await mintOutage.probe(true);
    },
    async close(): Promise<void> {
      datastoreOutage.close();
      await within(5000, mintOutage.close());
      // Each step is bounded: with Redis or Postgres gone, a close can wait for ever.
      await within(5000, closeQueues(queues));
      await within(5000, client.close());
      await within(5000, store.close());
      connection.disconnect();
    },
  };
}
