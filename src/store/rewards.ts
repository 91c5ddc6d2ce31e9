/**
 * Writes of <schema>.rewards and <schema>.reward_status_changes.
 *
 * A page is written by ONE statement (one round trip, one implicit transaction): the page
 * travels as a single jsonb parameter unpacked by jsonb_to_recordset (the fastest of the
 * batch forms measured here), and data-modifying CTEs create the consumer row when missing,
 * upsert the rewards and record the status changes. The last page of a sync also ends it
 * (missing rewards, last_synced_at) in the same statement; see finishCtes.
 */
import type pg from 'pg';
import { StoreInputError } from './errors.js';
import type { RewardPageWrite, RewardRecord } from './types.js';

/** The API's amount pattern: a decimal with at least one digit, optional sign and point. */
const amountPattern = /^(?!^[-+.]*$)[+-]?0*\d*\.?\d*$/;

/**
 * Compares the stored content of a reward (alias `a`) with a new observation (alias `b`).
 * Every content column is derived from `raw` (the item as received) and the consumer, so
 * comparing those two is comparing them all, and is far cheaper to plan than 11 columns.
 */
const contentDiffers = (a: string, b: string) =>
  `(${a}.consumer_id, ${a}.raw) is distinct from (${b}.consumer_id, ${b}.raw)`;

/**
 * last_seen_at rule: an unchanged reward writes nothing (no row version, ~no WAL), so
 * last_seen_at cannot move on every re-sync. It is refreshed when the row is written anyway
 * (content changed, or the reward came back from missing) and otherwise only once the stored
 * value is older than this: last_seen_at is exact to within one hour, at the cost of one
 * rewrite per reward per hour of re-syncing at most.
 */
const lastSeenGranularity = '1 hour';

/**
 * Builds the page statement. Parameters: $1 the page as a jsonb array, $2 the consumer id,
 * $3 when the page was read; with `finish` (the last page of a sync, see FinishSync) also
 * $4 the ids the scan listed, $5 when the scan started, $6 whether it may mark rewards
 * missing, $7 when the sync finished.
 *
 * Why `previous` locks: the old status of a change must be the one the update replaces. The
 * rows this write is about to update are read `for update`, in id order (as the insert is,
 * so two writers cannot deadlock); when another sync of the same consumer committed in
 * between, the lock returns its version (READ COMMITTED re-check), not the statement's
 * snapshot. The insert reads `previous` (left join), so the locks are taken before it runs.
 *
 * Stale-write guard: a stored row is only overwritten by a strictly newer observation
 * (`rewards.observed_at < excluded.observed_at`), so concurrent syncs converge on the newest.
 * observed_at is not bumped for unchanged rows; the guard stays sound because the stored
 * observed_at is never earlier than the moment the stored content became true.
 */
function rewardPageSql(s: string, options: { finish: boolean }): string {
  return `
with input as (
  select * from jsonb_to_recordset($1::jsonb) as r(
    id uuid, consumer_id text, amount numeric, type text, status text, consumer_status text,
    created_at timestamptz, transaction_external_id text, transaction_executed_at timestamptz,
    brand_name text, brand_logo text, raw jsonb)
),
${options.finish ? finishCtes(s, lastPageParameters, { page: true }) : consumerCte(s)},
previous as (
  select r.id, r.status, r.consumer_status,
         ${contentDiffers('r', 'i')} or r.missing_since is not null as changed
  from ${s}.rewards r join input i on i.id = r.id
  where r.observed_at < $3::timestamptz
    and (${contentDiffers('r', 'i')}
         or r.missing_since is not null
         or r.last_seen_at < $3::timestamptz - interval '${lastSeenGranularity}')
  order by r.id
  for update of r
),
written as (
  insert into ${s}.rewards as rewards (
    id, consumer_id, amount, type, status, consumer_status, created_at,
    transaction_external_id, transaction_executed_at, brand_name, brand_logo, raw,
    first_seen_at, last_seen_at, observed_at)
  select i.id, i.consumer_id, i.amount, i.type, i.status, i.consumer_status, i.created_at,
         i.transaction_external_id, i.transaction_executed_at, i.brand_name, i.brand_logo, i.raw,
         $3::timestamptz, $3::timestamptz, $3::timestamptz
  from input i left join previous p on p.id = i.id
  order by i.id
  on conflict (id) do update set
    consumer_id = excluded.consumer_id, amount = excluded.amount, type = excluded.type,
    status = excluded.status, consumer_status = excluded.consumer_status,
    created_at = excluded.created_at, transaction_external_id = excluded.transaction_external_id,
    transaction_executed_at = excluded.transaction_executed_at,
    brand_name = excluded.brand_name, brand_logo = excluded.brand_logo, raw = excluded.raw,
    last_seen_at = excluded.observed_at, observed_at = excluded.observed_at, missing_since = null
  where rewards.observed_at < excluded.observed_at
    and (${contentDiffers('rewards', 'excluded')}
         or rewards.missing_since is not null
         or rewards.last_seen_at < excluded.observed_at - interval '${lastSeenGranularity}')
  -- first_seen_at is never updated and is older than any observation allowed to update a row:
  -- it equals $3 exactly when this statement inserted the row.
  returning id, status, consumer_status, first_seen_at = $3::timestamptz as inserted
),
changes as (
  insert into ${s}.reward_status_changes (
    reward_id, consumer_id, old_status, new_status, old_consumer_status, new_consumer_status,
    observed_at)
  select w.id, $2::text, p.status, w.status, p.consumer_status, w.consumer_status, $3::timestamptz
  from written w join previous p on p.id = w.id
  where not w.inserted
    and (p.status, p.consumer_status) is distinct from (w.status, w.consumer_status)
  order by w.id
  returning 1
)
select
  (select count(*) from written where inserted)::int as inserted,
  (select count(*) from written w left join previous p on p.id = w.id
    where not w.inserted and coalesce(p.changed, true))::int as updated,
  (select count(*) from changes)::int as status_changes,
  ${options.finish ? '(select count(*) from missing)::int' : '0'} as marked_missing`;
}

/** A page that does not end a sync: the consumer row is created when missing, nothing more. */
const consumerCte = (s: string) => `consumer as (
  insert into ${s}.consumers (consumer_id) values ($2::text)
  on conflict (consumer_id) do nothing
)`;

/** Where the end of a sync finds its values: $n of the last-page or the finish-only statement. */
interface FinishParameters {
  consumerId: string;
  seenIds: string;
  scanStartedAt: string;
  markMissing: string;
  at: string;
}
const lastPageParameters: FinishParameters = {
  consumerId: '$2',
  seenIds: '$4',
  scanStartedAt: '$5',
  markMissing: '$6',
  at: '$7',
};
const finishOnlyParameters: FinishParameters = {
  consumerId: '$1',
  seenIds: '$2',
  scanStartedAt: '$3',
  markMissing: '$4',
  at: '$5',
};

/**
 * The end of a sync, folded into its last page (one round trip is a good share of a small
 * sync), or alone when that page is empty (a consumer without rewards: the page statement
 * would cost its planning for nothing):
 *
 * - Missing rewards: when `markMissing`, sets missing_since on the consumer's rewards the
 *   scan did not list. Only after a complete scan whose total did not move between its first
 *   and last page; after a partial or inconsistent scan (pages shifted, total changed)
 *   rewards merely skipped by the paging would be marked missing. Rewards first seen or
 *   rewritten after the scan started are left alone (another sync saw them), and so are this
 *   page's rewards, listed or not in `seenIds`: a statement must not update a row twice.
 *   Already-missing rewards keep their first missing_since; the page write clears it when a
 *   reward comes back.
 * - last_synced_at: set to `at`, never moved back by a late, older report. The consumer row
 *   is created when missing, as on every page.
 */
const finishCtes = (s: string, p: FinishParameters, options: { page: boolean }) => `consumer as (
  insert into ${s}.consumers as c (consumer_id, last_synced_at, updated_at)
  values (${p.consumerId}::text, ${p.at}::timestamptz, now())
  on conflict (consumer_id) do update set
    last_synced_at = greatest(c.last_synced_at, excluded.last_synced_at),
    updated_at = now()
),
missing as (
  update ${s}.rewards set missing_since = ${p.at}::timestamptz
  where ${p.markMissing}::boolean and consumer_id = ${p.consumerId}::text
    and missing_since is null
    and first_seen_at < ${p.scanStartedAt}::timestamptz
    and observed_at < ${p.scanStartedAt}::timestamptz
    and not (id = any(${p.seenIds}::uuid[]))${
      options.page ? '\n    and not exists (select 1 from input i where i.id = rewards.id)' : ''
    }
  returning 1
)`;

/** The end of a sync whose last page is empty. Parameters: see finishOnlyParameters. */
function finishOnlySql(s: string): string {
  return `
with ${finishCtes(s, finishOnlyParameters, { page: false })}
select 0 as inserted, 0 as updated, 0 as status_changes,
  (select count(*) from missing)::int as marked_missing`;
}

export interface WriteRewardPageInput {
  consumerId: string;
  rewards: readonly RewardRecord[];
  /** When the page was read from the API (not when it is written). */
  observedAt: Date;
  /** Given on the last page of a sync: the end of the sync is written by the same statement. */
  finish?: FinishSync;
}

export interface FinishSync {
  /** What a COMPLETE, consistent scan saw; null when the scan may not mark anything missing. */
  missing: {
    /** Every reward id the complete scan listed. */
    seenIds: readonly string[];
    /** When the scan read its first page: rewards first seen after it may be unlisted yet. */
    scanStartedAt: Date;
  } | null;
  /** When the sync finished: missing_since of newly missing rewards, and last_synced_at. */
  at: Date;
}

export interface PageStatements {
  /** A page in the middle of a sync. */
  page: string;
  /** The last page of a sync, with the end of the sync. */
  lastPage: string;
  /** The end of a sync whose last page is empty. */
  finishOnly: string;
}

export const pageStatements = (s: string): PageStatements => ({
  page: rewardPageSql(s, { finish: false }),
  lastPage: rewardPageSql(s, { finish: true }),
  finishOnly: finishOnlySql(s),
});

export async function writeRewardPage(
  pool: pg.Pool,
  sql: PageStatements,
  input: WriteRewardPageInput,
): Promise<RewardPageWrite & { markedMissing: number }> {
  const rows = toRows(input.consumerId, input.rewards);
  const { finish } = input;
  if (rows.length === 0 && !finish) {
    return { inserted: 0, updated: 0, unchanged: 0, statusChanges: 0, markedMissing: 0 };
  }
  const { rows: result } = await pool.query<{
    inserted: number;
    updated: number;
    status_changes: number;
    marked_missing: number;
  }>(...statementFor(sql, input, rows));
  const counts = result[0] ?? { inserted: 0, updated: 0, status_changes: 0, marked_missing: 0 };
  return {
    inserted: counts.inserted,
    updated: counts.updated,
    unchanged: input.rewards.length - counts.inserted - counts.updated,
    statusChanges: counts.status_changes,
    markedMissing: counts.marked_missing,
  };
}

/** The statement and parameters that write `input` (`rows`: its page, see toRows). */
function statementFor(
  sql: PageStatements,
  input: WriteRewardPageInput,
  rows: readonly Record<string, unknown>[],
): [string, unknown[]] {
  const { finish } = input;
  if (!finish) return [sql.page, [JSON.stringify(rows), input.consumerId, input.observedAt]];
  const end = [
    finish.missing?.seenIds ?? [],
    finish.missing?.scanStartedAt ?? finish.at,
    finish.missing !== null,
    finish.at,
  ];
  return rows.length === 0
    ? [sql.finishOnly, [input.consumerId, ...end]]
    : [sql.lastPage, [JSON.stringify(rows), input.consumerId, input.observedAt, ...end]];
}

/**
 * The page as jsonb_to_recordset rows. A reward listed twice (pages shifting under a
 * concurrent insert) is kept once, its last occurrence: ON CONFLICT cannot touch a row twice.
 */
function toRows(consumerId: string, rewards: readonly RewardRecord[]) {
  const byId = new Map<string, Record<string, unknown>>();
  for (const reward of rewards) {
    if (!amountPattern.test(reward.amount)) {
      throw new StoreInputError(
        `reward ${reward.id}: amount ${JSON.stringify(reward.amount)} is not a decimal string`,
      );
    }
    byId.set(reward.id, {
      id: reward.id,
      consumer_id: consumerId,
      amount: reward.amount,
      type: reward.type,
      status: reward.status,
      consumer_status: reward.consumerStatus,
      created_at: reward.createdAt,
      transaction_external_id: reward.transaction?.externalId ?? null,
      transaction_executed_at: reward.transaction?.executedAt ?? null,
      brand_name: reward.brand.name,
      brand_logo: reward.brand.logo ?? null,
      raw: reward.raw,
    });
  }
  return [...byId.values()];
}
