import type { Logger } from '../ops/logger.js';
import type { JobMetrics, WorkerMetrics } from '../ops/metrics.js';
import type { PerksClient } from '../perks/client.js';
import type { Queues } from '../queues/queues.js';
import type { TallyStore } from '../reconciliation/tally.js';
import type { Store } from '../store/store.js';
import type { DatastoreOutage } from './datastore-outage.js';
import type { MintOutage } from './mint-outage.js';

/** What every processor works with. Built once per process by `createRuntime`. */
export interface JobContext {
  client: Pick<PerksClient, 'enrollConsumer' | 'listRewardPages' | 'getReward'>;
  store: Store;
  queues: Queues;
  /** Where each reconciliation counts what became of its consumers. */
  tallies: TallyStore;
  /** Pauses the API queues while the token mint fails. */
  mintOutage: Pick<MintOutage, 'failed' | 'probe'>;
  /** Pauses this replica's jobs while PostgreSQL is away. */
  datastoreOutage: Pick<DatastoreOutage, 'met'>;
  logger: Logger;
  /** `consumersPerJob`: of the sync jobs it fans out (`fanOutConsumersPerJob`). */
  reconcile: { batchSize: number; maxPending: number; consumersPerJob: number };
  /**
   * Reward events older than `days` are pruned (none when undefined); with `keepUndelivered`
   * (webhooks on), never one not yet delivered or given up.
   */
  eventRetention: { days: number | undefined; keepUndelivered: boolean };
  /** Counters of job outcomes (the worker) and of domain facts (the processors). */
  metrics: JobMetrics & WorkerMetrics;
}
