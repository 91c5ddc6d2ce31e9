/**
 * Reward pages. A malformed envelope fails the page; a malformed item is set aside in `rejected`
 * (naming its fields) and the page's other items go on. The walk stops at ceil(total / per_page)
 * and refuses a server that repeats a page or over-delivers.
 */
import { z } from 'zod';
import { ResponseShapeError } from './errors.js';
import {
  collectionSchema,
  mayHoldUnstorable,
  type Reward,
  safeParseReward,
  uuidSchema,
} from './schemas.js';

/** An item the reward schema refused. */
export interface RejectedItem {
  /** The item's id when it is a uuid. */
  rewardId: string | null;
  /** The item as JSON text. */
  raw: string;
  /** Each failing field and why: `amount: must ...; brand.logo: must ...`. */
  error: string;
}

interface PageFields {
  page: number;
  perPage: number;
  /** Records matching the filters, as this page announced it. */
  total: number;
  /** The valid items' ids, in order. */
  ids: string[];
  rejected: RejectedItem[];
}

/**
 * The valid items: the response body as received (JSON text) when every item parsed, so that
 * the parse is garbage before the page is written; the parsed items when one was set aside.
 */
export type FetchedPage = PageFields &
  ({ json: string; items?: undefined } | { json?: undefined; items: Reward[] }) & {
    /**
     * When the request that was answered went out (not the first of its retries): the page
     * shows the API's state then or later, so a write stamped with it never passes for newer,
     * nor for older than it is by the retries before it.
     */
    requestedAt: Date;
  };

export type RewardPage = FetchedPage & {
  lastPage: boolean;
  /** This page's total differs from page 1's: records came or went mid-walk; rescan later. */
  totalChanged: boolean;
};

type ParsedPage = PageFields & { items: Reward[] };

/** A failed parse -> one ResponseShapeError naming the first failing field. */
export function shapeError(operation: string, error: z.ZodError): ResponseShapeError {
  const issue = error.issues[0];
  const path = z.core.toDotPath(issue?.path ?? []) || '(root)';
  const why = issue?.message ?? 'invalid';
  const message = `${operation}: response does not match the schema at ${path}: ${why}`;
  return new ResponseShapeError(message, { operation, path });
}

/** `text`: the body `json` was parsed from, to look for what PostgreSQL cannot store. */
export function parseRewardPage(operation: string, json: unknown, text?: string): ParsedPage {
  const envelope = collectionSchema.safeParse(json);
  if (!envelope.success) throw shapeError(operation, envelope.error);
  const items: Reward[] = [];
  const rejected: RejectedItem[] = [];
  const deep = text !== undefined && mayHoldUnstorable(text);
  for (const item of envelope.data.items) {
    const parsed = safeParseReward(item, deep);
    if (parsed.success) items.push(parsed.data);
    else rejected.push(rejectedItem(item, parsed.error));
  }
  const { page, per_page: perPage, total } = envelope.data.meta;
  return { page, perPage, total, ids: items.map((item) => item.id), items, rejected };
}

function rejectedItem(item: unknown, error: z.ZodError): RejectedItem {
  const id = (item as { id?: unknown } | null)?.id;
  const fields = error.issues.map((i) => `${z.core.toDotPath(i.path) || '(item)'}: ${i.message}`);
  return {
    rewardId: uuidSchema.safeParse(id).success ? (id as string).toLowerCase() : null,
    raw: JSON.stringify(item),
    error: fields.join('; '),
  };
}

/** Walks pages 1..n. `fetchPage` fetches and parses one page. */
export async function* walkRewardPages(
  operation: string,
  perPage: number,
  fetchPage: (page: number) => Promise<FetchedPage>,
): AsyncGenerator<RewardPage, void, undefined> {
  let firstTotal: number | undefined;
  let servedPerPage: number | undefined;
  let previousFirstId: string | undefined;
  for (let page = 1; ; page++) {
    const parsed = await fetchPage(page);
    const fail = (why: string) =>
      new ResponseShapeError(`${operation}: page ${page}: ${why}`, { operation, path: 'meta' });

    if (parsed.page !== page) throw fail(`the server answered page ${parsed.page}`);
    // A server may cap per_page below what we asked, never raise it nor change it mid-walk.
    if (parsed.perPage > perPage)
      throw fail(`per_page ${parsed.perPage} exceeds the ${perPage} asked`);
    servedPerPage ??= parsed.perPage;
    if (parsed.perPage !== servedPerPage) {
      throw fail(`per_page changed from ${servedPerPage} to ${parsed.perPage}`);
    }
    const received = parsed.ids.length + parsed.rejected.length;
    if (received > parsed.perPage) {
      throw fail(`${received} items exceed per_page ${parsed.perPage}`);
    }
    const announced = Math.max(0, parsed.total - (page - 1) * parsed.perPage);
    if (received > announced) {
      throw fail(`${received} items where total ${parsed.total} leaves ${announced}`);
    }
    firstTotal ??= parsed.total;
    const totalChanged = parsed.total !== firstTotal;
    // With the total moved, a page may start where the last did (per_page records came ahead
    // of it): a shift the rescan handles, not a server repeating itself.
    const firstId = parsed.ids[0];
    if (firstId !== undefined && firstId === previousFirstId && !totalChanged) {
      throw fail('the server repeated the previous page');
    }

    const pageCount = Math.ceil(parsed.total / parsed.perPage);
    // An empty page ends the walk even if total promised more: records went away mid-walk.
    const lastPage = page >= pageCount || received === 0;
    yield { ...parsed, lastPage, totalChanged };
    if (lastPage) return;
    previousFirstId = firstId;
  }
}
