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

export interface WriteRewardPageInput {
  consumerId: string;
  rewards: readonly RewardRecord[];
  /** When the page was read from the API. */
  observedAt: Date;
  /** On the last page of a sync: the same statement ends it. */
  finish?: FinishSync;
  /** The response body whose `items` parse to `rewards`, written as sent (no re-serializing). */
  json?: string;
}

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

export function preparePage(input: WriteRewardPageInput) {
  const rewards = distinctRewards(input.rewards);
  const sent = rewards.length === input.rewards.length ? input.json : undefined;
  return {
    consumerId: input.consumerId,
    ids: rewards.map((reward) => reward.id),
    /** { consumer_id, body }: an element of the statement's first parameter. */
    entryJson: entryOf(input.consumerId, sent ?? itemsOf(rewards)),
    asSent: sent !== undefined,
    rewards,
    /** Rewards given, duplicates included. */
    given: input.rewards.length,
    observedAt: input.observedAt,
    finish: input.finish,
  };
}

/** For a body as sent that jsonb refuses (a \u0000 escape, a number out of numeric's range). */
export function reserialized(page: PreparedPage): PreparedPage {
  if (!page.asSent) return page;
  return { ...page, entryJson: entryOf(page.consumerId, itemsOf(page.rewards)), asSent: false };
}

const itemsOf = (rewards: readonly RewardRecord[]) =>
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
  const marking = pages.some((page) => marks(page.finish));
  const notMissing = marking ? pages.flatMap((page) => page.ids) : [];
  const pagesJson = JSON.stringify(
    pages.map((page, p) => {
      const { finish } = page;
      // Not push(...ids): a spread of 10^5 arguments overflows the stack.
      if (marks(finish)) for (const id of finish?.missing?.seenIds ?? []) notMissing.push(id);
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
function distinctRewards(rewards: readonly RewardRecord[]): RewardRecord[] {
  const byId = new Map<string, RewardRecord>();
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
