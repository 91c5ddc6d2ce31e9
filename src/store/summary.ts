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
  rewardsByConsumerStatus: Record<string, number>;
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
  const { rows } = await pool.query<DatastoreSummary>(`
    select c.*, r.*,
           (select count(*)::int from ${s}.reward_status_changes) as "statusChanges"
    from (
      select count(*)::int as consumers,
             count(*) filter (where enrollment_outcome = 'created')::int as "enrolledCreated",
             count(*) filter (where enrollment_outcome = 'already_enrolled')::int
               as "enrolledAlready",
             count(*) filter (where not_enrolled_at is not null)::int as "notEnrolled",
             count(*) filter (where last_error is not null)::int as "withError",
             count(*) filter (where last_synced_at is not null)::int as synced,
             max(last_synced_at) as "lastSyncedAt"
      from ${s}.consumers
    ) c, (
      select count(*)::int as rewards,
             count(*) filter (where missing_since is not null)::int as "rewardsMissing",
             coalesce(sum(amount), 0)::text as "totalAmount",
             coalesce((select jsonb_object_agg(consumer_status, n) from (
                select consumer_status, count(*) as n from ${s}.rewards group by consumer_status
              ) g), '{}') as "rewardsByConsumerStatus"
      from ${s}.rewards
    ) r`);
  const row = rows[0];
  if (!row) throw new Error('summary query returned no row');
  return row;
}

export async function consumerFailures(
  pool: pg.Pool,
  schema: string,
  limit: number,
): Promise<ConsumerFailure[]> {
  const s = quoteIdentifier(assertSchemaName(schema));
  const { rows } = await pool.query<ConsumerFailure>(
    `select consumer_id as "consumerId", last_error as "lastError", updated_at as "updatedAt"
       from ${s}.consumers where last_error is not null order by updated_at desc limit $1`,
    [limit],
  );
  return rows;
}
