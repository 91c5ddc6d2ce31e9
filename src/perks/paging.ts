/**
 * Reward pages, accepted whole or not at all (one bad item fails the page). The walk stops at
 * ceil(total / per_page) and refuses a server that repeats a page or over-delivers.
 */
import { z } from 'zod';
import { ResponseShapeError } from './errors.js';
import { collectionSchema, type Reward, safeParseReward } from './schemas.js';

export interface RewardPage {
  page: number;
  perPage: number;
  /** Records matching the filters, as this page announced it. */
  total: number;
  items: Reward[];
  /** The response body as received (JSON text): `items` are its `items`, parsed, in order. */
  json: string;
  lastPage: boolean;
  /** This page's total differs from page 1's: records came or went mid-walk; rescan later. */
  totalChanged: boolean;
  /** Taken before the request (and retries): a write stamped with it never passes for newer. */
  requestedAt: Date;
}

type ParsedPage = Pick<RewardPage, 'page' | 'perPage' | 'total' | 'items'>;

/** A failed parse -> one ResponseShapeError naming the first failing field. */
export function shapeError(
  operation: string,
  error: z.ZodError,
  prefix: PropertyKey[] = [],
): ResponseShapeError {
  const issue = error.issues[0];
  const fullPath = [...prefix, ...(issue?.path ?? [])];
  const path = z.core.toDotPath(fullPath) || '(root)';
  const index =
    fullPath[0] === 'items' && typeof fullPath[1] === 'number' ? fullPath[1] : undefined;
  const why = issue?.message ?? 'invalid';
  const message = `${operation}: response does not match the schema at ${path}: ${why}`;
  return new ResponseShapeError(message, { operation, path, index });
}

export function parseRewardPage(operation: string, json: unknown): ParsedPage {
  const envelope = collectionSchema.safeParse(json);
  if (!envelope.success) throw shapeError(operation, envelope.error);
  const items = envelope.data.items.map((item, index) => {
    const parsed = safeParseReward(item);
    if (!parsed.success) throw shapeError(operation, parsed.error, ['items', index]);
    return parsed.data;
  });
  const { page, per_page: perPage, total } = envelope.data.meta;
  return { page, perPage, total, items };
}

/** Walks pages 1..n. `fetchPage` fetches and parses one page. */
export async function* walkRewardPages(
  operation: string,
  perPage: number,
  fetchPage: (page: number) => Promise<ParsedPage & { json: string }>,
): AsyncGenerator<RewardPage, void, undefined> {
  let firstTotal: number | undefined;
  let servedPerPage: number | undefined;
  let previousFirstId: string | undefined;
  for (let page = 1; ; page++) {
    const requestedAt = new Date();
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
    if (parsed.items.length > parsed.perPage) {
      throw fail(`${parsed.items.length} items exceed per_page ${parsed.perPage}`);
    }
    const announced = Math.max(0, parsed.total - (page - 1) * parsed.perPage);
    if (parsed.items.length > announced) {
      throw fail(`${parsed.items.length} items where total ${parsed.total} leaves ${announced}`);
    }
    const firstId = parsed.items[0]?.id;
    if (firstId !== undefined && firstId === previousFirstId) {
      throw fail('the server repeated the previous page');
    }

    firstTotal ??= parsed.total;
    const pageCount = Math.ceil(parsed.total / parsed.perPage);
    // An empty page ends the walk even if total promised more: records went away mid-walk.
    const lastPage = page >= pageCount || parsed.items.length === 0;
    yield { ...parsed, lastPage, totalChanged: parsed.total !== firstTotal, requestedAt };
    if (lastPage) return;
    previousFirstId = firstId;
  }
}
