/**
 * The store's input and output types. RewardRecord is the shared contract with the Perks
 * client: the client's parsed `Reward` is assignable to it, so the store never imports
 * src/perks (it knows SQL, not HTTP).
 */

/** The changes of a reward recorded in reward_events (EVENT_TYPES picks among them). */
export const rewardEventTypes = [
  'reward.created',
  'reward.status_changed',
  'reward.missing',
  'reward.restored',
] as const;
export type RewardEventType = (typeof rewardEventTypes)[number];

export interface RewardRecord {
  /** uuid, lower-cased as received. */
  id: string;
  /** Canonical decimal string ("12.50", "0.5", "-3"); never a JS number. Stored as numeric. */
  amount: string;
  /** RFC 3339 UTC with Z, as received. */
  createdAt: string;
  /** Open set: 'CASHBACK' | 'GIFT' | ... */
  type: string;
  /** Open set: 'VALIDATED' | 'PAID_IN' | 'PAID_OUT' | ... */
  status: string;
  /** 'VALIDATION' | 'POOLED' | 'PAID' */
  consumerStatus: string;
  transaction: { externalId: string; executedAt: string } | null;
  brand: { name: string | null; logo?: string | null };
  /** The item as received, stored as raw jsonb; the columns are read from it: the fields above must be its parse. */
  raw: Record<string, unknown>;
}

/** What one writeRewardPage did; inserted + updated + unchanged = rewards given. */
export interface RewardPageWrite {
  /** Rewards seen for the first time. */
  inserted: number;
  /** Stored rewards whose content changed, or that came back after being marked missing. */
  updated: number;
  /** Rewards not changed (or only last_seen_at), stale observations and duplicate ids. */
  unchanged: number;
  /** Rows added to reward_status_changes. */
  statusChanges: number;
}

export type EnrollmentOutcome = 'created' | 'already_enrolled';

/** A row of <schema>.consumers. */
export interface ConsumerRow {
  consumerId: string;
  userId: string | null;
  enrolledAt: Date | null;
  enrollmentOutcome: EnrollmentOutcome | null;
  /** Null when unknown (the consumer was not enrolled by this worker). */
  extraConsents: string[] | null;
  removedConsents: string[] | null;
  lastSyncedAt: Date | null;
  notEnrolledAt: Date | null;
  lastError: string | null;
  updatedAt: Date;
}
