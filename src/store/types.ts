/** The store's types. The Perks client's `Reward` is assignable to RewardRecord. */

/** The changes of a reward recorded in reward_events (EVENT_TYPES picks among them). */
export const rewardEventTypes = [
  'reward.created',
  'reward.status_changed',
  'reward.missing',
  'reward.restored',
] as const;
export type RewardEventType = (typeof rewardEventTypes)[number];

export interface RewardRecord {
  id: string;
  /** Decimal string ("12.50", "-3"), never a JS number. */
  amount: string;
  createdAt: string;
  /** Open set: 'CASHBACK' | 'GIFT' | ... */
  type: string;
  /** Open set: 'VALIDATED' | 'PAID_IN' | 'PAID_OUT' | ... */
  status: string;
  consumerStatus: string;
  transaction: { externalId: string; executedAt: string } | null;
  brand: { name: string | null; logo?: string | null };
  /** The item as received; the columns are read from it, so the fields above are its parse. */
  raw: Record<string, unknown>;
}

/** A reward item the client's schema refused: its uuid if any, its JSON text, the fields why. */
export type RejectedRewardRecord = { rewardId: string | null; raw: string; error: string };

/** inserted + updated + unchanged = rewards given. */
export interface RewardPageWrite {
  inserted: number;
  /** Content changed, or back after being missing. */
  updated: number;
  /** Also stale observations and duplicate ids. */
  unchanged: number;
  statusChanges: number;
}

export type EnrollmentOutcome = 'created' | 'already_enrolled';

export interface ConsumerRow {
  consumerId: string;
  userId: string | null;
  enrolledAt: Date | null;
  enrollmentOutcome: EnrollmentOutcome | null;
  /** Null when not enrolled by this worker. */
  extraConsents: string[] | null;
  removedConsents: string[] | null;
  lastSyncedAt: Date | null;
  notEnrolledAt: Date | null;
  lastError: string | null;
  updatedAt: Date;
}
