/**
 * What each part of the worker records, as interfaces: processors, the worker assembly, the
 * API client's hooks, the intake and webhook delivery. metrics.ts implements them in
 * Prometheus; the parts depend only on these.
 */
import type { Registry } from 'prom-client';

/** Why a job attempt did not complete, as a bounded label. */
export const failureReasons = ['unrecoverable', 'rate_limited', 'error'] as const;
export type FailureReason = (typeof failureReasons)[number];

/** Whatever can count its jobs by state: a BullMQ Queue. Kept structural so ops needs no queue code. */
export interface CountableQueue {
  readonly name: string;
  getJobCounts(...types: string[]): Promise<Record<string, number>>;
}

export type RewardSyncOutcome = 'synced' | 'not_enrolled' | 'retried_alone';

/** What processors record, through JobContext: domain facts, not job mechanics. */
export interface JobMetrics {
  /** One reward page written to Postgres, with what the write did. */
  rewardPageWritten(written: {
    inserted: number;
    updated: number;
    unchanged: number;
    statusChanges: number;
  }): void;
  enrollment(outcome: 'created' | 'already_enrolled'): void;
  /**
   * One consumer's sync ended: `synced`, `not_enrolled`, or `retried_alone` (it failed inside
   * a job of several consumers and was handed to a job of its own).
   */
  rewardSync(outcome: RewardSyncOutcome): void;
  /** Consumers enqueued so far by the running reconciliation. */
  reconciliationProgress(enqueued: number): void;
  reconciliationFinished(): void;
}

/** What the worker assembly records around every job attempt. */
export interface WorkerMetrics {
  /** Every attempt's duration; a rate-limited one also counts as retried (BullMQ emits no event). */
  jobAttempt(queue: string, outcome: 'completed' | FailureReason, durationSeconds: number): void;
  jobCompleted(queue: string): void;
  /** A job attempt failed; `final` when no attempt is left (or it was unrecoverable). */
  jobFailed(queue: string, reason: FailureReason, final: boolean): void;
}

export type IntakeSource = 'http' | 'outbox' | 'amqp';
/** accepted: a job was added; duplicate: one was already pending; rejected: invalid input. */
export type IntakeOutcome = 'accepted' | 'duplicate' | 'rejected';

/** What the intake paths record: signups and sync requests received, per source and outcome. */
export interface IntakeMetrics {
  intake(source: IntakeSource, outcome: IntakeOutcome, count?: number): void;
}

/** What webhook delivery records: each event delivered, refused (to retry) or given up. */
export interface WebhookMetrics {
  webhookDelivery(outcome: 'delivered' | 'retried' | 'failed'): void;
}

/** The PerksClient hooks, fed into API metrics. */
export interface ApiMetricsHooks {
  onRequest(event: { operation: string; status: number | undefined; durationMs: number }): void;
  onTokenMinted(): void;
  onRetry(event: { operation: string; delayMs: number }): void;
}

export interface Metrics extends JobMetrics, WorkerMetrics, IntakeMetrics, WebhookMetrics {
  readonly registry: Registry;
  readonly apiHooks: ApiMetricsHooks;
  /** Read the depth of these queues at every scrape (one getJobCounts each). */
  watchQueues(queues: readonly CountableQueue[]): void;
  /** Read the age of the oldest undelivered event at every scrape (seconds; 0 when none). */
  watchDeliveryLag(read: () => Promise<number>): void;
  /** The text exposition, as served on /metrics. */
  scrape(): Promise<string>;
}
