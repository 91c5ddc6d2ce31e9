/** What `status` and `demo` print about the datastore: counts, read in one round trip. */
import type pg from 'pg';
import { assertSchemaName, quoteIdentifier } from './identifier.js';

export interface DatastoreSummary {
  consumers: number;
  enrolledCreated: number;
  enrolledAlready: number;
  notEnrolled: number;
  withError: number;
  synced: number;
  rewards: number;
  rewardsMissing: number;
  statusChanges: number;
  /** Rewards per consumer_status (VALIDATION, POOLED, PAID). */
  rewardsByConsumerStatus: Record<string, number>;
  /** Sum of amounts, exact, as a decimal string. */
  totalAmount: string;
  lastSyncedAt: Date | null;
}

export interface ConsumerFailure {
  consumerId: string;
  lastError: string;
  updatedAt: Date;
}

export async function readSummary(pool: pg.Pool, schema: string): Promise<DatastoreSummary> {
  const s = quoteIdentifier(assertSchemaName(schema));
  const { rows } = await pool.query<{
    consumers: string;
    enrolled_created: string;
    enrolled_already: string;
    not_enrolled: string;
    with_error: string;
    synced: string;
    last_synced_at: Date | null;
    rewards: string;
    rewards_missing: string;
    total_amount: string;
    by_status: Record<string, number> | null;
    status_changes: string;
  }>(`
    select c.*, r.*, (select count(*) from ${s}.reward_status_changes) as status_changes
    from (
      select count(*) as consumers,
             count(*) filter (where enrollment_outcome = 'created') as enrolled_created,
             count(*) filter (where enrollment_outcome = 'already_enrolled') as enrolled_already,
             count(*) filter (where not_enrolled_at is not null) as not_enrolled,
             count(*) filter (where last_error is not null) as with_error,
             count(*) filter (where last_synced_at is not null) as synced,
             max(last_synced_at) as last_synced_at
      from ${s}.consumers
    ) c, (
      select count(*) as rewards,
             count(*) filter (where missing_since is not null) as rewards_missing,
             coalesce(sum(amount), 0)::text as total_amount,
             (select jsonb_object_agg(consumer_status, n) from (
                select consumer_status, count(*) as n from ${s}.rewards group by consumer_status
              ) g) as by_status
      from ${s}.rewards
    ) r`);
  const row = rows[0];
  if (!row) throw new Error('summary query returned no row');
  return {
    consumers: Number(row.consumers),
    enrolledCreated: Number(row.enrolled_created),
    enrolledAlready: Number(row.enrolled_already),
    notEnrolled: Number(row.not_enrolled),
    withError: Number(row.with_error),
    synced: Number(row.synced),
    rewards: Number(row.rewards),
    rewardsMissing: Number(row.rewards_missing),
    statusChanges: Number(row.status_changes),
    rewardsByConsumerStatus: row.by_status ?? {},
    totalAmount: row.total_amount,
    lastSyncedAt: row.last_synced_at,
  };
}

export async function consumerFailures(
  pool: pg.Pool,
  schema: string,
  limit: number,
): Promise<ConsumerFailure[]> {
  const s = quoteIdentifier(assertSchemaName(schema));
  const { rows } = await pool.query<{ consumer_id: string; last_error: string; updated_at: Date }>(
    `select consumer_id, last_error, updated_at from ${s}.consumers
      where last_error is not null order by updated_at desc limit $1`,
    [limit],
  );
  return rows.map((r) => ({
    consumerId: r.consumer_id,
    lastError: r.last_error,
    updatedAt: r.updated_at,
  }));
}
