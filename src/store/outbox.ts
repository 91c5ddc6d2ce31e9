/** <schema>.signup_outbox. Claim and mark share the caller's transaction, holding the rows. */
import type pg from 'pg';

/** NOTIFY channel of the insert trigger; the payload is the schema name. */
export const signupOutboxChannel = 'perks_signup_outbox';

const maxErrorLength = 2000;

export interface OutboxRow {
  id: string;
  user_id: string;
  extra_consents: string[] | null;
  removed_consents: string[] | null;
}

export type OutboxOutcome = { id: string; jobId: string } | { id: string; error: string };

/**
 * Oldest first, skip locked: replicas draining at once take different rows. Not `derivable`
 * (no PERKS_CONSUMER_ID_KEY): only the rows whose user_id is a consumer id as it is.
 */
export async function claimWaitingSignups(
  client: pg.ClientBase,
  schema: string,
  limit: number,
  derivable: boolean,
): Promise<OutboxRow[]> {
  const sql = `select * from ${schema}.claim_waiting_signups($1, $2)`;
  return (await client.query<OutboxRow>(sql, [limit, derivable])).rows;
}

export async function markSignupsProcessed(
  client: pg.ClientBase,
  schema: string,
  outcomes: readonly OutboxOutcome[],
): Promise<void> {
  if (outcomes.length === 0) return;
  await client.query(`select ${schema}.mark_signups_processed($1, $2, $3)`, [
    outcomes.map((o) => o.id),
    outcomes.map((o) => ('jobId' in o ? o.jobId : null)),
    outcomes.map((o) => ('error' in o ? o.error.slice(0, maxErrorLength) : null)),
  ]);
}

/** Deletes up to `limit` rows processed over `retentionDays` ago; never a waiting row. */
export async function deleteProcessedSignups(
  pool: pg.Pool,
  schema: string,
  input: { retentionDays: number; limit: number },
): Promise<number> {
  const sql = `select ${schema}.delete_processed_signups($1, $2) as n`;
  const { rows } = await pool.query<{ n: number }>(sql, [input.retentionDays, input.limit]);
  return rows[0]?.n ?? 0;
}
