/**
 * Writes of <schema>.rewards and <schema>.reward_status_changes.
 *
 * Pages are written by ONE statement (one round trip, one implicit transaction) for one page
 * or several (reward-writer.ts coalesces the small pages of concurrent syncs): the rewards
 * travel as a single jsonb parameter holding each reward's `raw` item once, the columns are
 * read from it in SQL, and data-modifying CTEs create the consumer rows when missing, upsert
 * the rewards and record the status changes. The last page of a sync also ends it (missing
 * rewards, last_synced_at) in the same statement; see rewardWriteSql.
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
 * Whether the stored reward `a` needs the write of `b`, observed at `observedAt`: only a
 * strictly newer observation writes, and only when the content changed, the reward comes
 * back from missing, or last_seen_at is due (below).
 */
const needsWrite = (a: string, b: string, observedAt: string) =>
  `(${a}.observed_at < ${observedAt}
    and (${contentDiffers(a, b)}
         or ${a}.missing_since is not null
         or ${a}.last_seen_at < ${observedAt} - interval '${lastSeenGranularity}'))`;

/**
 * The row of one raw reward item (`item`, of consumer `consumerId`), with the rewards table's
 * columns. Every column is read from the item as the API sent it, by the spec's field names:
 * the client has checked every item against the spec's schema before a page reaches the
 * store, and the casts give what RewardRecord's parsed fields hold (uuid and numeric read
 * "A0EE..." and "+0012.50" as the client's "a0ee..." and "12.50"). An absent brand logo and
 * a null transaction read as nulls.
 *
 * Sending each reward once, as received, rather than its columns and its raw item: the
 * parameter is half the size, and parsing it into jsonb was the largest single cost of a
 * page's statement (bench/RESULTS.md, round 5). The items stay one flat array with one set-
 * returning function over it: nested ones (pages, then their items) made the planner expect
 * 100 × 100 rows, an estimated cost past jit_above_cost for every statement.
 */
const rawColumns = (consumerId: string, item: string) => `
    select w.id, ${consumerId} as consumer_id, w.amount, w.type, w.status, w.consumer_status,
      w.created_at, w.transaction->>'external_id' as transaction_external_id,
      (w.transaction->>'executed_at')::timestamptz as transaction_executed_at,
      w.brand->>'name' as brand_name, w.brand->>'logo' as brand_logo, ${item} as raw
    from jsonb_to_record(${item}) as w(
      id uuid, amount numeric, type text, status text, consumer_status text,
      created_at timestamptz, transaction jsonb, brand jsonb)`;

/**
 * Builds THE write statement: any number of pages of different consumers, each optionally
 * ending its sync, in one statement (one round trip, one plan, one commit; see
 * reward-writer.ts for who is written together). Parameters:
 * - $1 the rewards of every page, a jsonb array of { consumer_id, raw }: `raw` is the reward
 *   as the API sent it (RewardRecord.raw), from which the columns are read (see rawColumns);
 * - $2 the pages, a jsonb array of { p, consumer_id, observed_at, finish, mark_missing,
 *   scan_started_at, at }, one per page, with rows or without (a sync whose last page is
 *   empty still ends); observed_at is when the page was read from the API, not written;
 * - $3 the reward ids the missing rewards are not: every id the complete scans of the
 *   finishing pages listed, and every id of the statement's rows (uuid[]).
 * It returns one row per page that did something: p and that page's counts.
 *
 * Two pages of one statement never share a consumer or a reward id (the writer sees to it):
 * a statement cannot update a row twice.
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
 *
 * Only new rows and rows `previous` locked reach the insert: a stored reward that needs no
 * write (the usual re-sync) is not even locked, so it writes no WAL. It is skipped on the
 * statement's snapshot, so a concurrent write to it that commits after the snapshot stands:
 * by the guard above that is a newer observation than the stored one, and it can be older than
 * this one only if the content changed and changed back between the two reads (or a
 * concurrent scan that did not list it marks it missing). Either outcome is the one these two
 * writes give in the other order, and the next sync of the consumer writes it again.
 *
 * The end of a sync (pages with `finish`):
 * - Missing rewards: when `mark_missing`, sets missing_since on the consumer's rewards the
 *   scan did not list. Only after a complete scan whose total did not move between its first
 *   and last page; after a partial or inconsistent scan (pages shifted, total changed)
 *   rewards merely skipped by the paging would be marked missing. Rewards first seen or
 *   rewritten after the scan started are left alone (another sync saw them), and so are the
 *   rewards this statement writes, listed or not: a statement must not update a row twice.
 *   Already-missing rewards keep their first missing_since; a write clears it when a reward
 *   comes back.
 * - last_synced_at: set to `at`, never moved back by a late, older report.
 * Every page creates its consumer's row when missing.
 */
export function rewardWriteSql(s: string): string {
  return `
with page as (
  select * from jsonb_to_recordset($2::jsonb) as f(
    p int, consumer_id text, observed_at timestamptz, finish boolean, mark_missing boolean,
    scan_started_at timestamptz, at timestamptz)
),
input as (
  -- stored_write: null when the reward is not stored, else whether the stored version needs
  -- this write (the statement's snapshot; \`previous\` checks again under the row lock). One
  -- index probe per row: lateral with offset 0, never flattened into a join the planner may
  -- turn into a scan of the whole table.
  select f.p, f.observed_at, r.*, s.write as stored_write
  from jsonb_to_recordset($1::jsonb) as e(consumer_id text, raw jsonb)
  join page f on f.consumer_id = e.consumer_id
  cross join lateral (${rawColumns('e.consumer_id', 'e.raw')}) r
  left join lateral (
    select ${needsWrite('x', 'r', 'f.observed_at')} as write
    from ${s}.rewards x where x.id = r.id offset 0
  ) s on true
),
consumer as (
  insert into ${s}.consumers as c (consumer_id, last_synced_at)
  select f.consumer_id, case when f.finish then f.at end from page f
  order by f.consumer_id
  on conflict (consumer_id) do update set
    last_synced_at = greatest(c.last_synced_at, excluded.last_synced_at),
    updated_at = now()
  where excluded.last_synced_at is not null
),
missing as (
  -- The candidates come from each page's own index scan (lateral; offset 0 keeps it from being
  -- flattened into a join that may scan the whole table), and are then updated by id (an
  -- array: an index lookup whatever the planner thinks of its size). The conditions are
  -- stated on the updated row again: a row changed concurrently is re-checked in its new
  -- version.
  update ${s}.rewards r set missing_since = f.at
  from page f
  where r.id = any(array(
      select x.id
      from page f cross join lateral (
        select c.id from ${s}.rewards c
        where c.consumer_id = f.consumer_id
          and c.missing_since is null
          and c.first_seen_at < f.scan_started_at
          and c.observed_at < f.scan_started_at
          and not (c.id = any($3::uuid[]))
        offset 0
      ) x
      where f.finish and f.mark_missing))
    and f.finish and f.mark_missing and r.consumer_id = f.consumer_id
    and r.missing_since is null
    and r.first_seen_at < f.scan_started_at
    and r.observed_at < f.scan_started_at
  returning f.p
),
previous as (
  select r.id, r.status, r.consumer_status,
         ${contentDiffers('r', 'i')} or r.missing_since is not null as changed
  from ${s}.rewards r join input i on i.id = r.id
  where r.id = any(array(select w.id from input w where w.stored_write))
    and ${needsWrite('r', 'i', 'i.observed_at')}
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
         i.observed_at, i.observed_at, i.observed_at
  from input i left join previous p on p.id = i.id
  -- A stored reward that needs no write is left out: ON CONFLICT DO UPDATE would lock it (a
  -- WAL record per row) only to find nothing to do.
  where i.stored_write is null or p.id is not null
  order by i.id
  on conflict (id) do update set
    consumer_id = excluded.consumer_id, amount = excluded.amount, type = excluded.type,
    status = excluded.status, consumer_status = excluded.consumer_status,
    created_at = excluded.created_at, transaction_external_id = excluded.transaction_external_id,
    transaction_executed_at = excluded.transaction_executed_at,
    brand_name = excluded.brand_name, brand_logo = excluded.brand_logo, raw = excluded.raw,
    last_seen_at = excluded.observed_at, observed_at = excluded.observed_at, missing_since = null
  where ${needsWrite('rewards', 'excluded', 'excluded.observed_at')}
  -- first_seen_at is never updated and an update needs a newer observation than the stored
  -- one (itself never older than first_seen_at): the two are equal exactly on an insert.
  returning id, status, consumer_status, first_seen_at = observed_at as inserted
),
changes as (
  insert into ${s}.reward_status_changes (
    reward_id, consumer_id, old_status, new_status, old_consumer_status, new_consumer_status,
    observed_at)
  select w.id, i.consumer_id, p.status, w.status, p.consumer_status, w.consumer_status,
         i.observed_at
  from written w join previous p on p.id = w.id join input i on i.id = w.id
  where not w.inserted
    and (p.status, p.consumer_status) is distinct from (w.status, w.consumer_status)
  order by w.id
  returning reward_id
)
select p, sum(inserted)::int as inserted, sum(updated)::int as updated,
  sum(status_changes)::int as status_changes, sum(marked_missing)::int as marked_missing
from (
  select i.p, w.inserted::int as inserted,
         (not w.inserted and coalesce(p.changed, true))::int as updated,
         0 as status_changes, 0 as marked_missing
  from written w join input i on i.id = w.id left join previous p on p.id = w.id
  union all
  select i.p, 0, 0, 1, 0 from changes c join input i on i.id = c.reward_id
  union all
  select m.p, 0, 0, 0, 1 from missing m
) counted
group by p`;
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

export type RewardPageResult = RewardPageWrite & { markedMissing: number };

/** A page checked and serialized, ready to be written alone or with others. */
export interface PreparedPage {
  consumerId: string;
  /** Distinct reward ids of the page. */
  ids: readonly string[];
  /** The page's items (one per distinct id) as a JSON array of { consumer_id, raw }. */
  itemsJson: string;
  /** Rewards given, duplicates included: what the counts add up to. */
  given: number;
  observedAt: Date;
  finish: FinishSync | undefined;
}

/**
 * Checks a page and serializes its items. Throws StoreInputError naming the reward when an
 * amount is not a decimal string: nothing of the page is written.
 */
export function preparePage(input: WriteRewardPageInput): PreparedPage {
  const rewards = distinctRewards(input.rewards);
  return {
    consumerId: input.consumerId,
    ids: rewards.map((reward) => reward.id),
    itemsJson: JSON.stringify(
      rewards.map((reward) => ({ consumer_id: input.consumerId, raw: reward.raw })),
    ),
    given: input.rewards.length,
    observedAt: input.observedAt,
    finish: input.finish,
  };
}

/** A page with neither rows nor the end of a sync writes nothing. */
export const isEmptyWrite = (page: PreparedPage) =>
  page.ids.length === 0 && page.finish === undefined;

/**
 * Writes `pages` (distinct consumers, distinct reward ids) with one statement; returns each
 * page's counts, in order. All or nothing: a failure fails every page of the statement.
 */
export async function writeRewardPages(
  pool: pg.Pool,
  sql: string,
  pages: readonly PreparedPage[],
): Promise<RewardPageResult[]> {
  assertDisjoint(pages);
  const withItems = pages.filter((page) => page.ids.length > 0);
  // One page (a large page is always alone) is sent as it is: no copy of a ~300 KB string.
  const itemsJson =
    withItems.length === 1
      ? (withItems[0]?.itemsJson ?? '[]')
      : `[${withItems.map((page) => page.itemsJson.slice(1, -1)).join(',')}]`;
  const marking = pages.some((page) => page.finish?.missing);
  const notMissing = marking ? pages.flatMap((page) => page.ids) : [];
  const pagesJson = JSON.stringify(
    pages.map((page, p) => {
      const { finish } = page;
      // Not push(...ids): a spread of 10^5 arguments overflows the stack.
      if (marking && finish?.missing) for (const id of finish.missing.seenIds) notMissing.push(id);
      return {
        p,
        consumer_id: page.consumerId,
        observed_at: page.observedAt,
        finish: finish !== undefined,
        mark_missing: Boolean(finish?.missing),
        scan_started_at: finish?.missing?.scanStartedAt ?? null,
        at: finish?.at ?? null,
      };
    }),
  );
  const { rows } = await pool.query<{
    p: number;
    inserted: number;
    updated: number;
    status_changes: number;
    marked_missing: number;
  }>(sql, [itemsJson, pagesJson, notMissing]);
  const byPage = new Map(rows.map((row) => [row.p, row]));
  return pages.map((page, p) => {
    const counts = byPage.get(p);
    const inserted = counts?.inserted ?? 0;
    const updated = counts?.updated ?? 0;
    return {
      inserted,
      updated,
      unchanged: page.given - inserted - updated,
      statusChanges: counts?.status_changes ?? 0,
      markedMissing: counts?.marked_missing ?? 0,
    };
  });
}

/** Pages of one statement share no consumer and no reward id: it cannot touch a row twice. */
function assertDisjoint(pages: readonly PreparedPage[]): void {
  if (pages.length < 2) return;
  const consumers = new Set<string>();
  const ids = new Set<string>();
  for (const page of pages) {
    if (consumers.has(page.consumerId)) {
      throw new Error(`two pages of consumer ${page.consumerId} in one statement`);
    }
    consumers.add(page.consumerId);
    for (const id of page.ids) {
      if (ids.has(id)) throw new Error(`reward ${id} twice in one statement`);
      ids.add(id);
    }
  }
}

/**
 * The page's rewards, each id once. A reward listed twice (pages shifting under a concurrent
 * insert) is kept once, its last occurrence: ON CONFLICT cannot touch a row twice.
 */
function distinctRewards(rewards: readonly RewardRecord[]): RewardRecord[] {
  const byId = new Map<string, RewardRecord>();
  for (const reward of rewards) {
    // The amount written is the item's (rawColumns); numeric would also take "NaN".
    const { amount } = reward.raw;
    if (typeof amount !== 'string' || !amountPattern.test(amount)) {
      throw new StoreInputError(
        `reward ${reward.id}: amount ${JSON.stringify(amount)} is not a decimal string`,
      );
    }
    byId.set(reward.id, reward);
  }
  return [...byId.values()];
}
