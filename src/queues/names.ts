import { randomBytes } from 'node:crypto';

/** Queue and job names, without `:` (BullMQ forbids it); keys live under QUEUE_PREFIX. */
export const queueNames = {
  enrollment: 'enrollment',
  rewardSync: 'reward-sync',
  reconciliation: 'reconciliation',
  /** Webhook deliveries (src/events), processed only where WEBHOOK_URL is set. */
  webhooks: 'webhooks',
} as const;

export type QueueKind = keyof typeof queueNames;
/** The queues src/jobs processes. */
export type JobQueueKind = Exclude<QueueKind, 'webhooks'>;

/** Most consumers one sync job may carry (SYNC_CONSUMERS_PER_JOB is at most this). */
export const maxConsumersPerSyncJob = 100;

export const jobNames = {
  enroll: 'enroll',
  syncRewards: 'sync-rewards',
  /** Several consumers in one job: a reconciliation's fan-out (SYNC_CONSUMERS_PER_JOB). */
  syncRewardsBatch: 'sync-rewards-batch',
  reconcile: 'reconcile',
  /** Fired by the cron scheduler; it only starts a (deduplicated) reconciliation. */
  reconcileTick: 'reconcile-tick',
  /** Deletes the reward events past EVENT_RETENTION_DAYS; on the reconciliation queue. */
  pruneEvents: 'prune-events',
} as const;

/** The one id of the reconciliation schedule, so every replica upserts the same scheduler. */
export const reconcileSchedulerId = 'reconcile-schedule';

/** The hourly pruning's scheduler, and the deduplication id of the pruning at start. */
export const pruneSchedulerId = 'prune-events-schedule';

/** At most one reconciliation is pending or running at a time, whoever started it. */
export const reconcileDeduplicationId = 'reconciliation';

// `enroll-<consumer id>-<when>`: never all digits, never a `:`. The deduplication id
// (`enroll-<consumer id>`) keeps one pending per consumer; the suffix lets a new one follow.
export function enrollmentJobId(consumerId: string, at: Date = new Date()): string {
  return `enroll-${consumerId}-${at.getTime().toString(36)}${randomBytes(2).toString('hex')}`;
}

/** A sync job's own id: a deduplicated add answers the pending job's, so the two tell. */
export function syncJobId(consumerId: string, at: Date = new Date()): string {
  return `sync-${consumerId}-${at.getTime().toString(36)}${randomBytes(2).toString('hex')}`;
}
