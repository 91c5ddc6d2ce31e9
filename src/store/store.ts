/** One pg pool bound to each table family's operations; the schema is quoted once here. */
import pg from 'pg';
import type { DatabaseConfig } from '../config.js';
import type { Logger } from '../ops/logger.js';
import { consumerQueries } from './consumers.js';
import { assertSchemaName, quoteIdentifier } from './identifier.js';
import { defaultWriterLimits, RewardWriter } from './reward-writer.js';
import {
  type FinishSync,
  type RewardPageResult,
  uuidArrayParameter,
  type WriteRewardPageInput,
} from './rewards.js';
import { type RejectedRewardRecord, type RewardEventType, rewardEventTypes } from './types.js';

export type { RewardPageWrite, RewardRecord } from './types.js';

export type Store = ReturnType<typeof createStore>;

export interface StoreOptions {
  logger?: Logger;
  /** `syncsInFlight`: sizes reward-writer.ts's batches. */
  writers?: number;
  /** EVENT_TYPES; default all. */
  eventTypes?: readonly RewardEventType[];
}

export function createStore(
  config: Pick<DatabaseConfig, 'url' | 'schema' | 'poolSize'>,
  options: StoreOptions = {},
) {
  const schema = assertSchemaName(config.schema);
  const s = quoteIdentifier(schema);
  const pool = new pg.Pool({
    connectionString: config.url,
    max: config.poolSize,
    application_name: 'perks-worker',
    connectionTimeoutMillis: 10_000,
    // No startup `options` (`-c jit=off`): PgBouncer refuses them.
  });
  // Unhandled, a dropped idle connection's 'error' would crash the process.
  pool.on('error', (error) => {
    options.logger?.warn({ err: error }, 'idle PostgreSQL connection lost');
  });
  const limits = defaultWriterLimits(config.poolSize, options.writers);
  const writer = new RewardWriter(pool, s, limits, options.eventTypes ?? rewardEventTypes);

  return {
    pool,
    schema,
    writes: writer.totals,
    /** One API page, its events and, given `finish`, the end of its sync, in one statement. */
    writeRewardPage: (input: WriteRewardPageInput): Promise<RewardPageResult> =>
      writer.write(input),
    /**
     * Up to `limit` stored rewards the end of a scan begun at `scanStartedAt` would mark missing:
     * not missing yet, stored before it began, not among `seenIds`.
     */
    unseenRewards: async (
      consumerId: string,
      seenIds: readonly string[],
      scanStartedAt: Date,
      limit: number,
    ): Promise<string[]> => {
      const { rows } = await pool.query<{ id: string }>(
        `select id from ${s}.rewards
          where consumer_id = $1 and missing_since is null
            and first_seen_at < $3 and observed_at < $3
            and id not in (select unnest($2::uuid[]))
          limit $4`,
        [consumerId, uuidArrayParameter(seenIds), scanStartedAt, limit],
      );
      return rows.map((row) => row.id);
    },
    /** A page's refused items, read at `at`; the page's write or a later one removes them. */
    recordRejectedRewards: async (
      consumerId: string,
      items: readonly RejectedRewardRecord[],
      at: Date,
    ): Promise<void> => {
      const rows = items.map(({ rewardId, raw, error }) => ({ reward_id: rewardId, raw, error }));
      const json = JSON.stringify(rows);
      await pool.query(`select ${s}.record_rejected_rewards($1, $2, $3)`, [consumerId, json, at]);
    },
    countRejectedRewards: async (): Promise<number> =>
      (await pool.query<{ n: number }>(`select count(*)::int as n from ${s}.rejected_rewards`))
        .rows[0]?.n ?? 0,
    ...consumerQueries(pool, s),
    /** The end of a sync without a page: marks rewards missing and sets last_synced_at. */
    finishSync: async ({
      consumerId,
      missing,
      at,
    }: { consumerId: string } & FinishSync): Promise<{ markedMissing: number }> => {
      const page = { consumerId, rewards: [], observedAt: at, finish: { missing, at } };
      const { markedMissing } = await writer.write(page);
      return { markedMissing };
    },
    ping: async (): Promise<void> => {
      await pool.query('select 1');
    },
    close: () => pool.end(),
  };
}
