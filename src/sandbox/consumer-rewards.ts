/** One consumer's rewards, paged fast: each reward serialised once, pages and orders cached. */
import { consumerStatusOf, type RewardJson } from './rewards.js';

export const rewardSorts = ['created_at', '-created_at', 'executed_at', '-executed_at'] as const;
export type RewardSort = (typeof rewardSorts)[number];
export const defaultRewardSort: RewardSort = 'created_at';

export interface RewardPageQuery {
  sort: RewardSort;
  types: readonly string[];
  page: number;
  perPage: number;
}

export type RewardPage = { itemsJson: string; total: number };

type CachedPage = RewardPage & { body?: Buffer };

interface StoredReward {
  json: RewardJson;
  text: string;
  createdMs: number;
  executedMs: number | null;
}

/** A few clients paging a few sort orders. */
const pageCacheLimit = 64;

export class ConsumerRewards {
  private readonly byId = new Map<string, StoredReward>();
  private readonly sorted = new Map<RewardSort, StoredReward[]>();
  private readonly pages = new Map<string, CachedPage>();

  get size(): number {
    return this.byId.size;
  }

  add(json: RewardJson): RewardJson {
    const executed = json.transaction?.executed_at;
    this.byId.set(json.id, {
      json,
      text: JSON.stringify(json),
      createdMs: Date.parse(json.created_at),
      executedMs: executed === undefined ? null : Date.parse(executed),
    });
    this.sorted.clear();
    this.pages.clear();
    return structuredClone(json);
  }

  remove(rewardId: string): boolean {
    if (!this.byId.delete(rewardId)) return false;
    this.sorted.clear();
    this.pages.clear();
    return true;
  }

  setStatus(rewardId: string, status: string, consumerStatus?: string): RewardJson | undefined {
    const stored = this.byId.get(rewardId);
    if (!stored) return undefined;
    stored.json.status = status;
    stored.json.consumer_status =
      consumerStatus ?? consumerStatusOf[status] ?? stored.json.consumer_status;
    stored.text = JSON.stringify(stored.json);
    this.pages.clear();
    return structuredClone(stored.json);
  }

  list(): RewardJson[] {
    return [...this.byId.values()].map((r) => structuredClone(r.json));
  }

  text(rewardId: string): string | undefined {
    return this.byId.get(rewardId)?.text;
  }

  page(query: RewardPageQuery): RewardPage {
    // Not the cached object: it may hold the body, which a caller on another thread would copy.
    const { itemsJson, total } = this.cachedPage(query);
    return { itemsJson, total };
  }

  pageBody(query: RewardPageQuery): Buffer {
    const page = this.cachedPage(query);
    const meta = `{"page":${query.page},"per_page":${query.perPage},"total":${page.total}}`;
    page.body ??= Buffer.from(`{"items":${page.itemsJson},"meta":${meta}}`);
    return page.body;
  }

  private cachedPage(query: RewardPageQuery): CachedPage {
    // JSON: joined with commas, `type=A,B` and `type=A&type=B` would share a key.
    const key = `${query.sort} ${query.page} ${query.perPage} ${JSON.stringify(query.types)}`;
    const cached = this.pages.get(key);
    if (cached) return cached;
    const ordered = this.ordered(query.sort);
    // The spec: "String filters are case-insensitive partial matches"; several values: any.
    const wanted = [...new Set(query.types.map((t) => t.toUpperCase()))];
    const matches = (type: string) => wanted.some((w) => type.toUpperCase().includes(w));
    const matching = wanted.length === 0 ? ordered : ordered.filter((r) => matches(r.json.type));
    const start = (query.page - 1) * query.perPage;
    const texts = matching.slice(start, start + query.perPage).map((r) => r.text);
    const page: CachedPage = { itemsJson: `[${texts.join(',')}]`, total: matching.length };
    if (this.pages.size >= pageCacheLimit) this.pages.clear();
    this.pages.set(key, page);
    return page;
  }

  private ordered(sort: RewardSort): StoredReward[] {
    const ordered = this.sorted.get(sort) ?? [...this.byId.values()].sort(comparator(sort));
    this.sorted.set(sort, ordered);
    return ordered;
  }
}

/** Rewards without the sort key (gifts have no executed_at) go last in both directions. */
function comparator(sort: RewardSort): (a: StoredReward, b: StoredReward) => number {
  const sign = sort.startsWith('-') ? -1 : 1;
  const key = sort.endsWith('executed_at') ? 'executedMs' : 'createdMs';
  return (a, b) => {
    const [ka, kb] = [a[key], b[key]];
    if (ka !== kb) return ka === null ? 1 : kb === null ? -1 : sign * (ka - kb);
    // Ties (and two missing keys) by id, so pages never overlap or skip.
    return a.json.id < b.json.id ? -1 : a.json.id > b.json.id ? 1 : 0;
  };
}
