/**
 * The datastore: one pg pool and the operations the job processors call. The SQL lives in
 * one module per table family (consumers.ts, rewards.ts); this file only binds them to a pool
 * and a schema. Every value is a bound parameter; the schema name, the only identifier in the
 * SQL text, is validated and quoted once here.
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
  /**
   * Writes one API page of a consumer's rewards in one statement (one transaction), which may
   * also write the small pages of other syncs (reward-writer.ts); given `finish` (the last
   * page of a sync), the end of the sync too (see rewards.ts). The reward events of the
   * changes are written by the same statement.
   */
  writeRewardPage(input: WriteRewardPageInput): Promise<RewardPageResult>;
  recordEnrollment(input: consumers.RecordEnrollmentInput): Promise<void>;
  recordConsumerError(input: consumers.RecordConsumerErrorInput): Promise<void>;
  markNotEnrolled(input: { consumerId: string; at: Date }): Promise<void>;
  /**
   * The end of a sync without a page to write with it: marks rewards missing (after a
   * complete, consistent scan) and sets last_synced_at, in one statement (see rewards.ts).
   */
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
  /**
   * The most reward writes in flight at once: the syncs the process runs at once
   * (`syncsInFlight`). Sizes the statements of small pages (reward-writer.ts).
   */
  writers?: number;
  /**
   * The reward events recorded in reward_events by every write (EVENT_TYPES); empty: none.
   * Default: all four.
   */
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
    // No startup `options` (such as `-c jit=off`): PgBouncer refuses a connection that sends
    // one unless told to ignore it. JIT, which cost ~160 ms of CPU for ~10 ms of work, is off
    // where it was paid, in the SET clauses of write_reward_pages (migrations 000002, 000005);
    // the statement that calls it is estimated far below jit_above_cost.
  });
  // An idle connection dropped by the server emits 'error' on the pool; unhandled, it would
  // crash the process. The next query simply opens a new connection.
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
