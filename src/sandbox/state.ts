/** The sandbox's data: consumers and their rewards, settings, counters, the request log. */
import type { ServerResponse } from 'node:http';
import { ConsumerRewards, type RewardPage, type RewardPageQuery } from './consumer-rewards.js';
import { SeededRandom } from './random.js';
import { generateReward, type RewardJson } from './rewards.js';
import type { TokenAuthority } from './tokens.js';

/** What the sandbox saw: never headers or bodies, so no secret. */
export interface RequestLogEntry {
  method: string;
  /** Path and query string as received. */
  path: string;
  /** 0 when reset on purpose. */
  status: number;
  consumerId?: string;
  at: string;
}

const emptyCounters = () => ({
  /** Per route: token, enroll, listRewards, getReward, unknown. */
  requests: {} as Record<string, number>,
  tokensMinted: 0,
  enrollmentsCreated: 0,
  enrollmentsConflicted: 0,
  /** API requests being answered at once (their latency included), at most; token requests aside. */
  peakInFlight: 0,
  /** Refused with a 429 for `concurrencyLimit`. */
  overConcurrencyLimit: 0,
});

/** The last `capacity` entries. */
export class RequestLog {
  private readonly entries: RequestLogEntry[] = [];

  constructor(private readonly capacity = 1000) {}

  add(entry: RequestLogEntry): void {
    this.entries.push(entry);
    if (this.entries.length > this.capacity) this.entries.shift();
  }

  list(): RequestLogEntry[] {
    return [...this.entries];
  }

  clear(): void {
    this.entries.length = 0;
  }
}

/** An unknown consumer or reward (404), or a consumer that exists (409): the control answer. */
export class SandboxLookupError extends Error {
  override readonly name = 'SandboxLookupError';
  constructor(
    readonly status: 404 | 409,
    message: string,
  ) {
    super(message);
  }
}

export type RewardsPerConsumer = number | { min: number; max: number };

type ConsumerRecord = { enrolled: boolean; rng: SeededRandom; rewards: ConsumerRewards };

/** The rewards of an unknown consumer under autoEnroll. */
const noRewards = new ConsumerRewards();

function unknownReward(consumerId: string, rewardId: string): never {
  throw new SandboxLookupError(404, `no reward ${rewardId} for ${consumerId}`);
}

export class SandboxState {
  private readonly consumers = new Map<string, ConsumerRecord>();
  readonly log = new RequestLog(1000);
  private stats = emptyCounters();
  /**
   * Latency added to every API response; requests per second per token before text/plain 429s;
   * requests answered at once before text/plain 429s (Retry-After 0).
   */
  readonly settings = {
    latencyMs: 0,
    rateLimitPerSecond: null as number | null,
    concurrencyLimit: null as number | null,
  };
  private inFlight = 0;
  private readonly windows = new Map<string, { second: number; count: number }>();

  constructor(
    private readonly seed: number,
    readonly autoEnroll: boolean,
    private readonly tokens: TokenAuthority,
  ) {}

  /** `rewards`: a count, or a range to draw it from (with the consumer's own generator). */
  addConsumer(id: string, opts: { enrolled?: boolean; rewards?: RewardsPerConsumer } = {}): void {
    if (this.consumers.has(id)) throw new SandboxLookupError(409, `consumer ${id} already exists`);
    const rng = new SeededRandom(this.seed, id);
    const { enrolled = true, rewards: count = 0 } = opts;
    this.consumers.set(id, { enrolled, rng, rewards: new ConsumerRewards() });
    this.addRewards(id, typeof count === 'number' ? count : rng.int(count.min, count.max));
  }

  isEnrolled(id: string): boolean {
    return this.consumers.get(id)?.enrolled ?? this.autoEnroll;
  }

  enrolledConsumerIds(): string[] {
    return [...this.consumers].filter(([, c]) => c.enrolled).map(([id]) => id);
  }

  listConsumers() {
    const all = [...this.consumers];
    return all.map(([id, { enrolled, rewards }]) => ({ id, enrolled, rewards: rewards.size }));
  }

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

  addRewards(consumerId: string, count: number): RewardJson[] {
    const { rewards, rng } = this.record(consumerId);
    return Array.from({ length: count }, () => rewards.add(generateReward(rng)));
  }

  /** Each given field overrides a generated reward's: `{amount: '+0012.50'}` is enough. */
  addRewardItems(consumerId: string, items: readonly Partial<RewardJson>[]): RewardJson[] {
    const { rewards, rng } = this.record(consumerId);
    return items.map((item) => rewards.add({ ...generateReward(rng), ...item } as RewardJson));
  }

  /** Any status is accepted; an unknown one keeps consumer_status unless `consumerStatus`. */
  setRewardStatus(consumerId: string, rewardId: string, status: string, consumerStatus?: string) {
    const updated = this.record(consumerId).rewards.setStatus(rewardId, status, consumerStatus);
    return updated ?? unknownReward(consumerId, rewardId);
  }

  removeReward(consumerId: string, rewardId: string): void {
    if (!this.record(consumerId).rewards.remove(rewardId)) unknownReward(consumerId, rewardId);
  }

  rewardsOf(consumerId: string): RewardJson[] {
    return this.record(consumerId).rewards.list();
  }

  rewardText(consumerId: string, rewardId: string): string | undefined {
    return this.consumers.get(consumerId)?.rewards.text(rewardId);
  }

  rewardPage(consumerId: string, query: RewardPageQuery): RewardPage {
    return this.pagedRewards(consumerId).page(query);
  }

  rewardPageBody(consumerId: string, query: RewardPageQuery): Buffer {
    return this.pagedRewards(consumerId).pageBody(query);
  }

  private pagedRewards(consumerId: string): ConsumerRewards {
    if (this.autoEnroll && !this.consumers.has(consumerId)) return noRewards;
    return this.record(consumerId).rewards;
  }

  counters() {
    return structuredClone(this.stats);
  }

  /** peakInFlight counts from now on (a bench's timed run after its warm-up). */
  restartPeakInFlight(): void {
    this.stats.peakInFlight = this.inFlight;
  }

  countRequest(route: string): void {
    this.stats.requests[route] = (this.stats.requests[route] ?? 0) + 1;
  }

  async mintToken(...args: Parameters<TokenAuthority['mint']>) {
    this.stats.tokensMinted++;
    return this.tokens.mint(...args);
  }

  revokeTokens(): void {
    this.tokens.revokeAll();
  }

  requestLog(): RequestLogEntry[] {
    return this.log.list();
  }

  setLatency(ms: number): void {
    this.settings.latencyMs = ms;
  }

  setRateLimit(perSecond: number | undefined): void {
    this.settings.rateLimitPerSecond = perSecond ?? null;
    this.windows.clear();
  }

  setConcurrencyLimit(limit: number | undefined): void {
    this.settings.concurrencyLimit = limit ?? null;
  }

  /** Counts a request in until its response closes; false: over `concurrencyLimit`, refuse it. */
  admit(response: ServerResponse): boolean {
    const limit = this.settings.concurrencyLimit;
    if (limit !== null && this.inFlight >= limit) {
      this.stats.overConcurrencyLimit++;
      return false;
    }
    this.inFlight++;
    this.stats.peakInFlight = Math.max(this.stats.peakInFlight, this.inFlight);
    response.once('close', () => {
      this.inFlight--;
    });
    return true;
  }

  /** The spec's "per-token request limits" in fixed one-second windows, keyed by Authorization. */
  overRateLimit(authorization: string): boolean {
    const limit = this.settings.rateLimitPerSecond;
    if (limit === null) return false;
    const second = Math.floor(Date.now() / 1000);
    let window = this.windows.get(authorization);
    if (window?.second !== second) {
      // A token per request must not grow the map.
      if (this.windows.size > 10_000) this.windows.clear();
      window = { second, count: 0 };
      this.windows.set(authorization, window);
    }
    return ++window.count > limit;
  }

  clear(): void {
    this.consumers.clear();
    this.log.clear();
    this.stats = emptyCounters();
  }

  private record(id: string): ConsumerRecord {
    const consumer = this.consumers.get(id);
    if (!consumer) throw new SandboxLookupError(404, `no consumer ${id}`);
    return consumer;
  }
}
