/** The sandbox's data: consumers, their enrollment and rewards, counters and the request log. */
import {
  ConsumerRewards,
  type RewardPage,
  type RewardPageQuery,
  rewardPageBody,
} from './consumer-rewards.js';
import { SeededRandom } from './random.js';
import { generateReward, type RewardJson } from './rewards.js';

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

export interface SandboxCounters {
  /** Per route: token, enroll, listRewards, getReward, unknown. */
  requests: Record<string, number>;
  tokensMinted: number;
  enrollmentsCreated: number;
  enrollmentsConflicted: number;
}

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

export function emptyCounters(): SandboxCounters {
  return { requests: {}, tokensMinted: 0, enrollmentsCreated: 0, enrollmentsConflicted: 0 };
}

/** Control answers 404, or 409 for consumer-exists. */
export class SandboxLookupError extends Error {
  override readonly name = 'SandboxLookupError';
  constructor(
    readonly reason: 'unknown-consumer' | 'unknown-reward' | 'consumer-exists',
    message: string,
  ) {
    super(message);
  }
}

export type RewardsPerConsumer = number | { min: number; max: number };

interface ConsumerRecord {
  id: string;
  enrolled: boolean;
  rng: SeededRandom;
  rewards: ConsumerRewards;
}

const emptyPage: RewardPage = Object.freeze({ itemsJson: '[]', total: 0 });

export class SandboxState {
  private readonly consumers = new Map<string, ConsumerRecord>();
  private readonly log = new RequestLog(1000);
  private stats: SandboxCounters = emptyCounters();
  /** Wired by the server. */
  revokeTokens: () => void = () => {};
  setLatency: (ms: number) => void = () => {};
  setRateLimit: (perSecond: number | undefined) => void = () => {};

  constructor(
    private readonly seed: number,
    readonly autoEnroll = false,
  ) {}

  addConsumer(id: string, opts: { enrolled?: boolean; rewards?: number } = {}): void {
    if (this.consumers.has(id)) {
      throw new SandboxLookupError('consumer-exists', `consumer ${id} already exists`);
    }
    this.consumers.set(id, {
      id,
      enrolled: opts.enrolled ?? true,
      rng: new SeededRandom(this.seed, id),
      rewards: new ConsumerRewards(),
    });
    if (opts.rewards) this.addRewards(id, opts.rewards);
  }

  addConsumerWithDistribution(id: string, distribution: RewardsPerConsumer, enrolled = true) {
    this.addConsumer(id, { enrolled });
    const rng = this.record(id).rng;
    const count =
      typeof distribution === 'number' ? distribution : rng.int(distribution.min, distribution.max);
    this.addRewards(id, count);
  }

  isEnrolled(id: string): boolean {
    const consumer = this.consumers.get(id);
    return consumer ? consumer.enrolled : this.autoEnroll;
  }

  enrolledConsumerIds(): string[] {
    return [...this.consumers.values()].filter((c) => c.enrolled).map((c) => c.id);
  }

  listConsumers(): { id: string; enrolled: boolean; rewards: number }[] {
    return [...this.consumers.values()].map((c) => ({
      id: c.id,
      enrolled: c.enrolled,
      rewards: c.rewards.size,
    }));
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
    const consumer = this.record(consumerId);
    const added: RewardJson[] = [];
    for (let i = 0; i < count; i++) added.push(consumer.rewards.add(generateReward(consumer.rng)));
    return added;
  }

  /** Each given field overrides a generated reward's: `{amount: '+0012.50'}` is enough. */
  addRewardItems(consumerId: string, items: readonly Partial<RewardJson>[]): RewardJson[] {
    const consumer = this.record(consumerId);
    return items.map((item) =>
      consumer.rewards.add({ ...generateReward(consumer.rng), ...item } as RewardJson),
    );
  }

  /** Any status is accepted; an unknown one keeps consumer_status unless `consumerStatus`. */
  setRewardStatus(
    consumerId: string,
    rewardId: string,
    status: string,
    consumerStatus?: string,
  ): RewardJson {
    const updated = this.record(consumerId).rewards.setStatus(rewardId, status, consumerStatus);
    if (!updated) {
      throw new SandboxLookupError('unknown-reward', `no reward ${rewardId} for ${consumerId}`);
    }
    return updated;
  }

  removeReward(consumerId: string, rewardId: string): void {
    if (!this.record(consumerId).rewards.remove(rewardId)) {
      throw new SandboxLookupError('unknown-reward', `no reward ${rewardId} for ${consumerId}`);
    }
  }

  rewardsOf(consumerId: string): RewardJson[] {
    return this.record(consumerId).rewards.list();
  }

  rewardText(consumerId: string, rewardId: string): string | undefined {
    return this.consumers.get(consumerId)?.rewards.text(rewardId);
  }

  rewardPage(consumerId: string, query: RewardPageQuery): RewardPage {
    return this.pagedRewards(consumerId)?.page(query) ?? { ...emptyPage };
  }

  rewardPageBody(consumerId: string, query: RewardPageQuery): Buffer {
    return this.pagedRewards(consumerId)?.pageBody(query) ?? rewardPageBody(emptyPage, query);
  }

  private pagedRewards(consumerId: string): ConsumerRewards | undefined {
    if (this.autoEnroll && !this.consumers.has(consumerId)) return undefined;
    return this.record(consumerId).rewards;
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
}
