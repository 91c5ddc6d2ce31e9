/**
 * Queue and job names. Queue keys live under the QUEUE_PREFIX (BullMQ's `prefix`), so one
 * Redis can host several deployments side by side. Names contain no `:` (BullMQ forbids it).
 */
export const queueNames = {
  enrollment: 'enrollment',
  rewardSync: 'reward-sync',
  reconciliation: 'reconciliation',
} as const;

export type QueueKind = keyof typeof queueNames;

export const jobNames = {
  enroll: 'enroll',
  syncRewards: 'sync-rewards',
  reconcile: 'reconcile',
  /** Fired by the cron scheduler; it only starts a (deduplicated) reconciliation. */
  reconcileTick: 'reconcile-tick',
} as const;

/** The one id of the reconciliation schedule, so every replica upserts the same scheduler. */
export const reconcileSchedulerId = 'reconcile-schedule';

/** At most one reconciliation is pending or running at a time, whoever started it. */
export const reconcileDeduplicationId = 'reconciliation';

/** Job ids derive from the consumer id: consumer ids never hold `:` and are never all digits. */
export function enrollmentJobId(consumerId: string): string {
  return `enroll-${consumerId}`;
}
