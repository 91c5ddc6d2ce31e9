/**
 * The sandbox's data: consumers, their rewards, counters and the request log.
 *
 * Built for speed under benchmarks: each reward's JSON is serialised once and cached as a
 * string, a page is a join of cached strings (itself cached until the consumer's rewards
 * change), and each sort order of a consumer's rewards is computed once and kept until a
 * reward is added or removed (a status change rewrites the cached string in place and keeps
 * every order).
 */
import { SandboxLookupError } from './lookup-error.js';
import { SeededRandom } from './random.js';
import {
  emptyCounters,
  RequestLog,
  type RequestLogEntry,
  type SandboxCounters,
} from './request-log.js';
import { consumerStatusOf, generateReward, type RewardJson } from './rewards.js';

/** The closed list of `sort` values the rewards collection accepts. */
export const rewardSorts = ['created_at', '-created_at', 'executed_at', '-executed_at'] as const;
export type RewardSort = (typeof rewardSorts)[number];
/** Applied when the request has no `sort`. */
export const defaultRewardSort: RewardSort = 'created_at';

export type RewardsPerConsumer = number | { min: number; max: number };

interface StoredReward {
  json: RewardJson;
  /** JSON.stringify(json), refreshed whenever json changes. */
  text: string;
  createdMs: number;
  executedMs: number | null;
}

interface ConsumerRecord {
  id: string;
  enrolled: boolean;
  rng: SeededRandom;
  rewards: Map<string, StoredReward>;
  sorted: Map<RewardSort, StoredReward[]>;
  /** Serialised pages by query, dropped on any change to the consumer's rewards. */
  pages: Map<string, CachedPage>;
}

export interface RewardPage {
  /** The items as a JSON array, joined from the cached reward strings. */
  itemsJson: string;
  total: number;
}

/** A cached page, and its whole response body once it has been served. */
interface CachedPage extends RewardPage {
  body?: Buffer;
}

/** The page of a consumer the state does not hold, under autoEnroll. */
const emptyPage: CachedPage = Object.freeze({ itemsJson: '[]', total: 0 });

export interface RewardPageQuery {
  sort: RewardSort;
  types: readonly string[];
  page: number;
  perPage: number;
}

/** Enough for a few clients paging a few sort orders; a sync re-reads the same pages. */
const pageCacheLimit = 64;

export class SandboxState {
  private readonly consumers = new Map<string, ConsumerRecord>();
  private readonly log = new RequestLog(1000);
  private stats: SandboxCounters = emptyCounters();
  /** Wired by the server: these act on the token authority and the response pipeline. */
  revokeTokens: () => void = () => {};
  setLatency: (ms: number) => void = () => {};
  setRateLimit: (perSecond: number | undefined) => void = () => {};

  /**
   * @param autoEnroll Any consumer id the state does not hold answers as enrolled with no
   *   rewards, without being stored: a million-consumer benchmark costs no memory here.
   */
  constructor(
    private readonly seed: number,
    readonly autoEnroll = false,
  ) {}

  /** Adds a consumer, enrolled unless told otherwise, with `rewards` generated rewards (0). */
  addConsumer(id: string, opts: { enrolled?: boolean; rewards?: number } = {}): void {
    if (this.consumers.has(id)) {
      throw new SandboxLookupError('consumer-exists', `consumer ${id} already exists`);
    }
    this.consumers.set(id, {
      id,
      enrolled: opts.enrolled ?? true,
      rng: new SeededRandom(this.seed, id),
      rewards: new Map(),
      sorted: new Map(),
      pages: new Map(),
    });
    if (opts.rewards) this.addRewards(id, opts.rewards);
  }

  /** Draws a reward count from the distribution with the consumer's own sequence. */
  addConsumerWithDistribution(id: string, distribution: RewardsPerConsumer, enrolled = true) {
    this.addConsumer(id, { enrolled });
    const rng = this.record(id).rng;
    const count =
      typeof distribution === 'number' ? distribution : rng.int(distribution.min, distribution.max);
    this.addRewards(id, count);
  }

  hasConsumer(id: string): boolean {
    return this.consumers.has(id);
  }

  isEnrolled(id: string): boolean {
    const consumer = this.consumers.get(id);
    return consumer ? consumer.enrolled : this.autoEnroll;
  }

  enrolledConsumerIds(): string[] {
    return [...this.consumers.values()].filter((c) => c.enrolled).map((c) => c.id);
  }

  /** Every consumer, enrolled or not, with its reward count, in insertion order. */
  listConsumers(): { id: string; enrolled: boolean; rewards: number }[] {
    return [...this.consumers.values()].map((c) => ({
      id: c.id,
      enrolled: c.enrolled,
      rewards: c.rewards.size,
    }));
  }

  /**
   * The API's enrollment: creates an enrolled consumer, or enrolls a known, not yet enrolled
   * one. An enrolled id is a conflict.
   */
  enroll(id: string, rewardsOnEnroll = 0): 'created' | 'conflict' {
    const existing = this.consumers.get(id);
    if (existing?.enrolled) {
      this.stats.enrollmentsConflicted++;
      return 'conflict';
    }
    if (existing) existing.enrolled = true;
    else this.addConsumer(id, { rewards: rewardsOnEnroll });
    this.stats.enrollmentsCreated++;
    return 'created';
  }

  /** Generates `count` rewards for the consumer; returns them as the API serialises them. */
  addRewards(consumerId: string, count: number): RewardJson[] {
    const consumer = this.record(consumerId);
    const added: RewardJson[] = [];
    for (let i = 0; i < count; i++) added.push(this.store(consumer, generateReward(consumer.rng)));
    return added;
  }

  /**
   * Adds explicit rewards: each given field overrides a generated reward's, so a test can
   * write just `{amount: '+0012.50'}` or `{type: 'VOUCHER'}`.
   */
  addRewardItems(consumerId: string, items: readonly Partial<RewardJson>[]): RewardJson[] {
    const consumer = this.record(consumerId);
    return items.map((item) =>
      this.store(consumer, { ...generateReward(consumer.rng), ...item } as RewardJson),
    );
  }

  /**
   * Sets a reward's status and derives consumer_status. Any string is accepted so tests can
   * exercise unknown statuses; for those, consumer_status is `consumerStatus` if given, else
   * left as it was.
   */
  setRewardStatus(
    consumerId: string,
    rewardId: string,
    status: string,
    consumerStatus?: string,
  ): RewardJson {
    const stored = this.storedReward(consumerId, rewardId);
    stored.json.status = status;
    stored.json.consumer_status =
      consumerStatus ?? consumerStatusOf[status] ?? stored.json.consumer_status;
    stored.text = JSON.stringify(stored.json);
    this.record(consumerId).pages.clear();
    return structuredClone(stored.json);
  }

  removeReward(consumerId: string, rewardId: string): void {
    const consumer = this.record(consumerId);
    if (!consumer.rewards.delete(rewardId)) {
      throw new SandboxLookupError('unknown-reward', `no reward ${rewardId} for ${consumerId}`);
    }
    consumer.sorted.clear();
    consumer.pages.clear();
  }

  /** The consumer's rewards as API JSON items (copies), in insertion order. */
  rewardsOf(consumerId: string): RewardJson[] {
    return [...this.record(consumerId).rewards.values()].map((r) => structuredClone(r.json));
  }

  /** The cached serialisation of one reward, or undefined when the consumer has no such id. */
  rewardText(consumerId: string, rewardId: string): string | undefined {
    return this.consumers.get(consumerId)?.rewards.get(rewardId)?.text;
  }

  /** One page of a consumer's rewards, filtered by type (any of `types`, case-insensitive). */
  rewardPage(consumerId: string, query: RewardPageQuery): RewardPage {
    // Not the cached object: once served it also holds the body, which a caller on another
    // thread (the bench's) would receive as a copy.
    const { itemsJson, total } = this.cachedPage(consumerId, query);
    return { itemsJson, total };
  }

  /**
   * The page as the API's response body, encoded once and kept with the page: a sync served
   * again (every round of a benchmark) costs the sandbox no serialisation. The sandbox shares
   * the benchmark's cores with the worker, as the real API would not (bench/RESULTS.md, round
   * 16).
   */
  rewardPageBody(consumerId: string, query: RewardPageQuery): Buffer {
    const page = this.cachedPage(consumerId, query);
    if (page.body) return page.body;
    const meta = `{"page":${query.page},"per_page":${query.perPage},"total":${page.total}}`;
    const body = Buffer.from(`{"items":${page.itemsJson},"meta":${meta}}`);
    if (page !== emptyPage) page.body = body;
    return body;
  }

  private cachedPage(consumerId: string, query: RewardPageQuery): CachedPage {
    if (this.autoEnroll && !this.consumers.has(consumerId)) return emptyPage;
    const consumer = this.record(consumerId);
    // The types as JSON: joined with commas, `type=A,B` (one value) and `type=A&type=B` would
    // share a key and one would be served the other's page.
    const key = `${query.sort} ${query.page} ${query.perPage} ${JSON.stringify(query.types)}`;
    const cached = consumer.pages.get(key);
    if (cached) return cached;
    const ordered = this.ordered(consumer, query.sort);
    const wanted = new Set(query.types.map((t) => t.toUpperCase()));
    const matching =
      wanted.size === 0 ? ordered : ordered.filter((r) => wanted.has(r.json.type.toUpperCase()));
    const start = (query.page - 1) * query.perPage;
    const texts = matching.slice(start, start + query.perPage).map((r) => r.text);
    const page: CachedPage = { itemsJson: `[${texts.join(',')}]`, total: matching.length };
    if (consumer.pages.size >= pageCacheLimit) consumer.pages.clear();
    consumer.pages.set(key, page);
    return page;
  }

  counters(): SandboxCounters {
    return structuredClone(this.stats);
  }

  countRequest(route: string): void {
    this.stats.requests[route] = (this.stats.requests[route] ?? 0) + 1;
  }

  countTokenMinted(): void {
    this.stats.tokensMinted++;
  }

  recordRequest(entry: RequestLogEntry): void {
    this.log.add(entry);
  }

  requestLog(): RequestLogEntry[] {
    return this.log.list();
  }

  /** Forgets every consumer, counter and log entry (the server re-seeds after this). */
  clear(): void {
    this.consumers.clear();
    this.log.clear();
    this.stats = emptyCounters();
  }

  private record(id: string): ConsumerRecord {
    const consumer = this.consumers.get(id);
    if (!consumer) throw new SandboxLookupError('unknown-consumer', `no consumer ${id}`);
    return consumer;
  }

  private storedReward(consumerId: string, rewardId: string): StoredReward {
    const stored = this.record(consumerId).rewards.get(rewardId);
    if (!stored) {
      throw new SandboxLookupError('unknown-reward', `no reward ${rewardId} for ${consumerId}`);
    }
    return stored;
  }

  private store(consumer: ConsumerRecord, json: RewardJson): RewardJson {
    const executed = json.transaction?.executed_at;
    consumer.rewards.set(json.id, {
      json,
      text: JSON.stringify(json),
      createdMs: Date.parse(json.created_at),
      executedMs: executed === undefined ? null : Date.parse(executed),
    });
    consumer.sorted.clear();
    consumer.pages.clear();
    return structuredClone(json);
  }

  private ordered(consumer: ConsumerRecord, sort: RewardSort): StoredReward[] {
    let ordered = consumer.sorted.get(sort);
    if (!ordered) {
      ordered = [...consumer.rewards.values()].sort(comparator(sort));
      consumer.sorted.set(sort, ordered);
    }
    return ordered;
  }
}

/** Rewards without the sort key (gifts have no executed_at) go last in both directions. */
function comparator(sort: RewardSort): (a: StoredReward, b: StoredReward) => number {
  const descending = sort.startsWith('-');
  const key = sort.endsWith('executed_at')
    ? (r: StoredReward) => r.executedMs
    : (r: StoredReward) => r.createdMs;
  return (a, b) => {
    const ka = key(a);
    const kb = key(b);
    if (ka === null || kb === null || ka !== kb) {
      if (ka === null && kb !== null) return 1;
      if (kb === null && ka !== null) return -1;
      if (ka !== null && kb !== null) return descending ? kb - ka : ka - kb;
    }
    // Ties (and two missing keys) by id, so pages never overlap or skip.
    return a.json.id < b.json.id ? -1 : a.json.id > b.json.id ? 1 : 0;
  };
}
