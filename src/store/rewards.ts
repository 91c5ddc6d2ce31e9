/**
 * Rewards, their status changes and events: one call of write_reward_pages (its repeatable
 * file states the rules) for one page or several, each `raw` item once in one jsonb parameter.
 */
import type pg from 'pg';
import { StoreInputError } from './errors.js';
import type { RewardEventType, RewardPageWrite, RewardRecord } from './types.js';

/** The API's amount: a decimal with at least one digit, optional sign and point. */
const amountPattern = /^(?!^[-+.]*$)[+-]?0*\d*\.?\d*$/;

export function rewardWriteSql(s: string): string {
  return `select p, inserted, updated, status_changes as "statusChanges",
    marked_missing as "markedMissing"
  from ${s}.write_reward_pages($1::jsonb, $2::jsonb, $3::uuid[], $4::text[])`;
}

/** A page's rewards: parsed records, or a body as sent whose `items` the client's schema passed. */
export type PageRewards =
  | { rewards: readonly RewardRecord[]; json?: string }
  | { json: string; ids: readonly string[]; rewards?: undefined };

export type WriteRewardPageInput = PageRewards & {
  consumerId: string;
  /** When the page was read from the API. */
  observedAt: Date;
  /** On the last page of a sync: the same statement ends it. */
  finish?: FinishSync;
};

export interface FinishSync {
  /**
   * What a COMPLETE, consistent scan saw, null for any other: the consumer's rejected_rewards
   * not seen since `scanStartedAt` are removed, and unlisted rewards marked missing.
   */
  missing: {
    seenIds: readonly string[];
    /** When the scan read its first page: rewards first seen after it may be unlisted yet. */
    scanStartedAt: Date;
    /** It rejected an item, maybe a stored reward's: nothing is marked missing. */
    rejected?: boolean;
  } | null;
  /** When the sync finished: missing_since of newly missing rewards, and last_synced_at. */
  at: Date;
}

export type RewardPageResult = RewardPageWrite & { markedMissing: number };

export type PreparedPage = ReturnType<typeof preparePage>;

/** What the SQL reads of a reward: its id and the item as received. */
type Item = Pick<RewardRecord, 'id' | 'raw'>;

export function preparePage(input: WriteRewardPageInput) {
  const ids = input.rewards ? input.rewards.map((reward) => reward.id) : input.ids;
  // A body as sent holds each id once, or it is rebuilt from its items, each id once.
  const sent =
    input.json !== undefined && new Set(ids).size === ids.length ? input.json : undefined;
  const rewards = sent === undefined ? distinctRewards(input.rewards ?? itemsIn(input.json)) : null;
  return {
    consumerId: input.consumerId,
    ids: rewards ? rewards.map((reward) => reward.id) : ids,
    /** { consumer_id, body }: an element of the statement's first parameter. */
    entryJson: entryOf(input.consumerId, sent ?? bodyOf(rewards ?? [])),
    /** The body as sent, kept for `reserialized`; else null. */
    sent: sent ?? null,
    /** Rewards given, duplicates included. */
    given: ids.length,
    observedAt: input.observedAt,
    finish: input.finish,
  };
}

/**
 * For a body as sent that jsonb refuses: a number out of numeric's range, or a \u0000 outside
 * the items (the client's schema refuses an item holding one).
 */
export function reserialized(page: PreparedPage): PreparedPage {
  if (page.sent === null) return page;
  return { ...page, entryJson: entryOf(page.consumerId, bodyOf(itemsIn(page.sent))), sent: null };
}

/** The items of a body as sent, parsed again (rare: duplicates, or a body jsonb refused). */
function itemsIn(json: string): Item[] {
  const { items } = JSON.parse(json) as { items: Record<string, unknown>[] };
  return items.map((raw) => ({ id: String(raw.id).toLowerCase(), raw }));
}

const bodyOf = (rewards: readonly Item[]) =>
  `{"items":${JSON.stringify(rewards.map((reward) => reward.raw))}}`;

const entryOf = (consumerId: string, body: string) =>
  `{"consumer_id":${JSON.stringify(consumerId)},"body":${body}}`;

export const isEmptyWrite = (page: PreparedPage) =>
  page.ids.length === 0 && page.finish === undefined;

/** One statement, all or nothing; each page's counts, in order. */
export async function writeRewardPages(
  pool: pg.Pool,
  sql: string,
  pages: readonly PreparedPage[],
  eventTypes: readonly RewardEventType[],
): Promise<RewardPageResult[]> {
  assertDisjoint(pages);
  const withItems = pages.filter((page) => page.ids.length > 0);
  const itemsJson = `[${withItems.map((page) => page.entryJson).join(',')}]`;
  const marks = (finish?: FinishSync) => Boolean(finish?.missing && !finish.missing.rejected);
  // The statement never marks this call's rows missing: $3 holds only the other ids the
  // finishing scans saw (none for a one-page consumer), each a uuid PostgreSQL parses.
  const inCall = pages.some((page) => marks(page.finish))
    ? new Set(pages.flatMap((page) => page.ids))
    : undefined;
  const notMissing: string[] = [];
  const pagesJson = JSON.stringify(
    pages.map((page, p) => {
      const { finish } = page;
      // Not push(...ids): a spread of 10^5 arguments overflows the stack.
      if (inCall && marks(finish)) {
        for (const id of finish?.missing?.seenIds ?? []) if (!inCall.has(id)) notMissing.push(id);
      }
      return {
        p,
        consumer_id: page.consumerId,
        observed_at: page.observedAt,
        finish: finish !== undefined,
        mark_missing: marks(finish),
        scan_started_at: finish?.missing?.scanStartedAt ?? null,
        at: finish?.at ?? null,
      };
    }),
  );
  const { rows } = await pool.query<Omit<RewardPageResult, 'unchanged'> & { p: number }>(sql, [
    itemsJson,
    pagesJson,
    uuidArrayParameter(notMissing),
    eventTypes,
  ]);
  const byPage = new Map(rows.map((row) => [row.p, row]));
  return pages.map((page, p) => {
    const { inserted = 0, updated = 0, statusChanges = 0, markedMissing = 0 } = byPage.get(p) ?? {};
    const unchanged = page.given - inserted - updated;
    return { inserted, updated, unchanged, statusChanges, markedMissing };
  });
}

const plainUuid = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;

/** uuid[] as array text by one join (node-postgres's quoting was 5% of a sync's allocations). */
export function uuidArrayParameter(ids: readonly string[]): string | readonly string[] {
  for (const id of ids) if (!plainUuid.test(id)) return ids;
  return `{${ids.join(',')}}`;
}

/** A statement must not touch a row twice. */
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

/** Each id once, its last occurrence (pages shift under inserts): ON CONFLICT touches a row once. */
function distinctRewards(rewards: readonly Item[]): Item[] {
  const byId = new Map<string, Item>();
  for (const reward of rewards) {
    // The amount written is the item's (read in SQL); numeric would also take "NaN".
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
