/**
 * The datastore: one pg pool bound to the operations of each table family (consumers.ts,
 * rewards.ts). The schema name, the only identifier in the SQL text, is quoted once here.
 */
import pg from 'pg';
import type { Logger } from '../ops/logger.js';
import * as consumers from './consumers.js';
import { assertSchemaName, quoteIdentifier } from './identifier.js';
import { defaultWriterLimits, RewardWriter } from './reward-writer.js';
import type { FinishSync, RewardPageResult, WriteRewardPageInput } from './rewards.js';
import { type ConsumerRow, type RewardEventType, rewardEventTypes } from './types.js';

export type { FinishSync } from './rewards.js';
export {
  type ConsumerRow,
  type EnrollmentOutcome,
  type RewardEventType,
  type RewardPageWrite,
  type RewardRecord,
  rewardEventTypes,
} from './types.js';

export interface StoreConfig {
  /** postgres:// URL (DATABASE_URL). */
  url: string;
  /** Schema holding the tables (DATABASE_SCHEMA, default perks). */
  schema: string;
  /** Connections in the pool (DATABASE_POOL_SIZE, default 10). */
  poolSize: number;
}

export interface Store {
  readonly pool: pg.Pool;
  readonly schema: string;
  /** Reward write statements run and the pages they wrote (see reward-writer.ts). */
  readonly writes: RewardWriter['totals'];
  /** One API page, its events and, given `finish`, the end of its sync, in one statement. */
  writeRewardPage(input: WriteRewardPageInput): Promise<RewardPageResult>;
  recordEnrollment(input: consumers.RecordEnrollmentInput): Promise<void>;
  recordConsumerError(input: consumers.RecordConsumerErrorInput): Promise<void>;
  markNotEnrolled(input: { consumerId: string; at: Date }): Promise<void>;
  /** The end of a sync without a page: marks rewards missing and sets last_synced_at. */
  finishSync(input: { consumerId: string } & FinishSync): Promise<{ markedMissing: number }>;
  getConsumer(consumerId: string): Promise<ConsumerRow | undefined>;
  listEnrolledConsumerIds(input: { after: string | null; limit: number }): Promise<string[]>;
  countReconcilableConsumers(): Promise<number>;
  /** `select 1`, for readiness checks. */
  ping(): Promise<void>;
  close(): Promise<void>;
}

export interface StoreOptions {
  logger?: Logger;
  /** The syncs the process runs at once (`syncsInFlight`): sizes reward-writer.ts's batches. */
  writers?: number;
  /** The reward events every write records (EVENT_TYPES); default all, empty none. */
  eventTypes?: readonly RewardEventType[];
}

export function createStore(config: StoreConfig, options: StoreOptions = {}): Store {
  const schema = assertSchemaName(config.schema);
  const s = quoteIdentifier(schema);
  const pool = new pg.Pool({
    connectionString: config.url,
    max: config.poolSize,
    application_name: 'perks-worker',
    connectionTimeoutMillis: 10_000,
    // No startup `options` (`-c jit=off`): PgBouncer refuses them. JIT is off where it was
    // paid, in write_reward_pages' SET clauses.
  });
  // Unhandled, a dropped idle connection's 'error' would crash the process.
  pool.on('error', (error) => {
    options.logger?.warn({ err: error }, 'idle PostgreSQL connection lost');
  });
  const writer = new RewardWriter(
    pool,
    s,
    defaultWriterLimits(config.poolSize, options.writers),
    options.eventTypes ?? rewardEventTypes,
  );

  return {
    pool,
    schema,
    writes: writer.totals,
    writeRewardPage: (input) => writer.write(input),
    recordEnrollment: (input) => consumers.recordEnrollment(pool, s, input),
    recordConsumerError: (input) => consumers.recordConsumerError(pool, s, input),
    markNotEnrolled: (input) => consumers.markNotEnrolled(pool, s, input),
    finishSync: async ({ consumerId, missing, at }) => {
      const { markedMissing } = await writer.write({
        consumerId,
        rewards: [],
        observedAt: at,
        finish: { missing, at },
      });
      return { markedMissing };
    },
    getConsumer: (consumerId) => consumers.getConsumer(pool, s, consumerId),
    listEnrolledConsumerIds: (input) => consumers.listEnrolledConsumerIds(pool, s, input),
    countReconcilableConsumers: () => consumers.countReconcilableConsumers(pool, s),
    ping: async () => {
      await pool.query('select 1');
    },
    close: () => pool.end(),
  };
}
