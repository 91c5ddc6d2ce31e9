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
  /** Rows of rejected_rewards: reward items a sync refused. */
  rewardsRejected: number;
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
  // rejected_rewards is counted here: a new column of datastore_summary would change its return
  // type, which an older build's `create or replace` of it could not apply again.
  const { rows } = await pool.query<DatastoreSummary>(
    `select *, (select count(*)::int from ${s}.rejected_rewards) as "rewardsRejected"
       from ${s}.datastore_summary()`,
  );
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
