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

/** Oldest first, skip locked: replicas draining at once take different rows. */
export async function claimWaitingSignups(
  client: pg.ClientBase,
  schema: string,
  limit: number,
): Promise<OutboxRow[]> {
  const { rows } = await client.query<OutboxRow>(
    `select id, user_id, extra_consents, removed_consents
       from ${schema}.signup_outbox
      where processed_at is null
      order by id
      limit $1
        for update skip locked`,
    [limit],
  );
  return rows;
}

export async function markSignupsProcessed(
  client: pg.ClientBase,
  schema: string,
  outcomes: readonly OutboxOutcome[],
): Promise<void> {
  if (outcomes.length === 0) return;
  await client.query(
    `update ${schema}.signup_outbox as o
        set processed_at = now(), job_id = m.job_id, error = m.error
       from unnest($1::bigint[], $2::text[], $3::text[]) as m(id, job_id, error)
      where o.id = m.id`,
    [
      outcomes.map((o) => o.id),
      outcomes.map((o) => ('jobId' in o ? o.jobId : null)),
      outcomes.map((o) => ('error' in o ? o.error.slice(0, maxErrorLength) : null)),
    ],
  );
}

/** Deletes up to `limit` rows processed over `retentionDays` ago; never a waiting row. */
export async function deleteProcessedSignups(
  pool: pg.Pool,
  schema: string,
  input: { retentionDays: number; limit: number },
): Promise<number> {
  const { rowCount } = await pool.query(
    `delete from ${schema}.signup_outbox
      where id in (
        select id from ${schema}.signup_outbox
         where processed_at < now() - make_interval(days => $1)
         order by processed_at
         limit $2
           for update skip locked)`,
    [input.retentionDays, input.limit],
  );
  return rowCount ?? 0;
}
