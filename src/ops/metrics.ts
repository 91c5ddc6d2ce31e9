/**
 * Prometheus metrics of one worker process, in a registry of its own (not prom-client's
 * global one), so a test can run several workers side by side and scrape each.
 *
 * Labels are bounded sets only: queue, outcome or reason class, API operation, status class.
 * Never a consumer id or a job id: those belong in logs, where they cost nothing per value.
 */
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';
import { withTimeout } from './timeouts.js';

export type {
  ApiMetricsHooks,
  CountableQueue,
  FailureReason,
  IntakeMetrics,
  IntakeOutcome,
  IntakeSource,
  JobMetrics,
  Metrics,
  RewardSyncOutcome,
  WebhookMetrics,
  WorkerMetrics,
} from './metric-types.js';
export { failureReasons } from './metric-types.js';

import type { CountableQueue, Metrics } from './metric-types.js';

export interface MetricsOptions {
  /** Node's default metrics (process_*, nodejs_*). Default true. */
  defaultMetrics?: boolean;
}

const durationBuckets = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300];
const apiBuckets = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

const lintFailingDefaults = [
  'nodejs_active_handles_total',
  'nodejs_active_requests_total',
  'nodejs_active_resources_total',
];

/** A scrape gives up on queue depths after this long. */
const queueDepthTimeoutMs = 1000;

function statusClass(status: number | undefined): '2xx' | '3xx' | '4xx' | '5xx' | 'error' {
  if (status === undefined || status < 200 || status > 599) return 'error';
  return `${Math.floor(status / 100)}xx` as '2xx' | '3xx' | '4xx' | '5xx';
}

export function createMetrics(options: MetricsOptions = {}): Metrics {
  const registry = new Registry();
  if (options.defaultMetrics ?? true) {
    collectDefaultMetrics({ register: registry });
    // Gauges named like counters, which `promtool check metrics` refuses; each is only the sum
    // of its per-type gauge (`nodejs_active_handles{type}` ...), which stays.
    for (const name of lintFailingDefaults) registry.removeSingleMetric(name);
  }
  const registers = [registry];

  const jobsCompleted = new Counter({
    name: 'perks_worker_jobs_completed_total',
    help: 'Jobs completed, per queue.',
    labelNames: ['queue'] as const,
    registers,
  });
  const jobsFailed = new Counter({
    name: 'perks_worker_jobs_failed_total',
    help: 'Jobs failed for good (no attempt left, or unrecoverable), per queue and reason.',
    labelNames: ['queue', 'reason'] as const,
    registers,
  });
  const jobsRetried = new Counter({
    name: 'perks_worker_jobs_retried_total',
    help: 'Job attempts that failed and will be retried (error: with backoff, spending an attempt; rate_limited: after the API asked us to wait, not spending one).',
    labelNames: ['queue', 'reason'] as const,
    registers,
  });
  const jobDuration = new Histogram({
    name: 'perks_worker_job_duration_seconds',
    help: 'Duration of one job attempt, per queue and outcome.',
    labelNames: ['queue', 'outcome'] as const,
    buckets: durationBuckets,
    registers,
  });
  const apiDuration = new Histogram({
    name: 'perks_worker_api_request_duration_seconds',
    help: 'Duration of one HTTP exchange with the Perks API, per operation and status class.',
    labelNames: ['operation', 'status_class'] as const,
    buckets: apiBuckets,
    registers,
  });
  const apiThrottled = new Counter({
    name: 'perks_worker_api_throttled_total',
    help: 'Responses 429 (throttled) from the Perks API, per operation.',
    labelNames: ['operation'] as const,
    registers,
  });
  const apiRetryWaits = new Counter({
    name: 'perks_worker_api_retry_waits_total',
    help: 'Waits before another try of an API call (backoff after a 5xx or transport error, or a short 429 wait), per operation.',
    labelNames: ['operation'] as const,
    registers,
  });
  const apiRetryWaitSeconds = new Counter({
    name: 'perks_worker_api_retry_wait_seconds_total',
    help: 'Time spent waiting before another try of an API call, per operation.',
    labelNames: ['operation'] as const,
    registers,
  });
  const tokensMinted = new Counter({
    name: 'perks_worker_tokens_minted_total',
    help: 'Access tokens minted by this process (replicas share one through Redis).',
    registers,
  });
  const rewards = new Counter({
    name: 'perks_worker_rewards_written_total',
    help: 'Rewards written to Postgres, per result: inserted (new), updated (changed) or unchanged.',
    labelNames: ['result'] as const,
    registers,
  });
  const statusChanges = new Counter({
    name: 'perks_worker_reward_status_changes_total',
    help: 'Reward status changes recorded.',
    registers,
  });
  const pages = new Counter({
    name: 'perks_worker_reward_pages_written_total',
    help: 'Reward pages written to Postgres.',
    registers,
  });
  const enrollments = new Counter({
    name: 'perks_worker_enrollments_total',
    help: 'Consumers enrolled, per outcome (created, or already_enrolled: a 409).',
    labelNames: ['outcome'] as const,
    registers,
  });
  const rewardSyncs = new Counter({
    name: 'perks_worker_reward_syncs_total',
    help: 'Consumer reward syncs ended, per outcome: synced, not_enrolled, or retried_alone (failed in a job of several consumers; retried in its own job).',
    labelNames: ['outcome'] as const,
    registers,
  });
  const reconcileEnqueued = new Gauge({
    name: 'perks_worker_reconciliation_enqueued_consumers',
    help: 'Consumers enqueued for a reward sync by the reconciliation running in this process (0 when none).',
    registers,
  });
  const reconciliations = new Counter({
    name: 'perks_worker_reconciliations_finished_total',
    help: 'Reconciliations that finished fanning out in this process.',
    registers,
  });

  const intakeEvents = new Counter({
    name: 'perks_worker_intake_events_total',
    help: 'Signups and sync requests received by the intake, per source (http, outbox, amqp) and outcome (accepted, duplicate: one was already pending, rejected: invalid).',
    labelNames: ['source', 'outcome'] as const,
    registers,
  });
  for (const source of ['http', 'outbox', 'amqp']) {
    for (const outcome of ['accepted', 'duplicate', 'rejected'])
      intakeEvents.inc({ source, outcome }, 0);
  }

  const webhookDeliveries = new Counter({
    name: 'perks_worker_webhook_deliveries_total',
    help: 'Reward events POSTed to WEBHOOK_URL, per outcome: delivered (2xx), retried (refused or no answer; tried again with backoff), failed (given up after WEBHOOK_MAX_AGE_HOURS).',
    labelNames: ['outcome'] as const,
    registers,
  });
  let readDeliveryLag: (() => Promise<number>) | undefined;
  new Gauge({
    name: 'perks_worker_webhook_oldest_undelivered_seconds',
    help: 'Age of the oldest reward event not yet delivered to WEBHOOK_URL (0 when none), read from PostgreSQL at scrape time; absent without webhooks.',
    registers,
    async collect() {
      if (!readDeliveryLag) return;
      try {
        this.set(await withTimeout(readDeliveryLag(), queueDepthTimeoutMs));
      } catch {
        this.reset(); // PostgreSQL away or slow: left out of this scrape
      }
    },
  });

  let watched: readonly CountableQueue[] = [];
  new Gauge({
    name: 'perks_worker_queue_jobs',
    help: 'Jobs in each queue per state, read from Redis at scrape time (shared by all replicas).',
    labelNames: ['queue', 'state'] as const,
    registers,
    async collect() {
      this.reset();
      let counts: { queue: string; counts: Record<string, number> }[];
      try {
        counts = await withTimeout(
          Promise.all(
            watched.map(async (queue) => ({
              queue: queue.name,
              counts: await queue.getJobCounts(
                'wait',
                'prioritized',
                'active',
                'delayed',
                'failed',
              ),
            })),
          ),
          queueDepthTimeoutMs,
        );
      } catch {
        // Redis away: the worker connection waits for it forever. A scrape must not: the depth
        // series are left out of this scrape (and /readyz says why).
        return;
      }
      for (const { queue, counts: c } of counts) {
        // 'prioritized' jobs are waiting too, in another list.
        this.set({ queue, state: 'waiting' }, (c.wait ?? 0) + (c.prioritized ?? 0));
        this.set({ queue, state: 'active' }, c.active ?? 0);
        this.set({ queue, state: 'delayed' }, c.delayed ?? 0);
        this.set({ queue, state: 'failed' }, c.failed ?? 0);
      }
    },
  });

  return {
    registry,
    apiHooks: {
      onRequest({ operation, status, durationMs }) {
        apiDuration.observe({ operation, status_class: statusClass(status) }, durationMs / 1000);
        if (status === 429) apiThrottled.inc({ operation });
      },
      onTokenMinted() {
        tokensMinted.inc();
      },
      onRetry({ operation, delayMs }) {
        apiRetryWaits.inc({ operation });
        apiRetryWaitSeconds.inc({ operation }, delayMs / 1000);
      },
    },
    rewardPageWritten(written) {
      pages.inc();
      rewards.inc({ result: 'inserted' }, written.inserted);
      rewards.inc({ result: 'updated' }, written.updated);
      rewards.inc({ result: 'unchanged' }, written.unchanged);
      statusChanges.inc(written.statusChanges);
    },
    enrollment(outcome) {
      enrollments.inc({ outcome });
    },
    rewardSync(outcome) {
      rewardSyncs.inc({ outcome });
    },
    webhookDelivery(outcome) {
      webhookDeliveries.inc({ outcome });
    },
    watchDeliveryLag(read) {
      readDeliveryLag = read;
      for (const outcome of ['delivered', 'retried', 'failed'])
        webhookDeliveries.inc({ outcome }, 0);
    },
    intake(source, outcome, count = 1) {
      intakeEvents.inc({ source, outcome }, count);
    },
    reconciliationProgress(enqueued) {
      reconcileEnqueued.set(enqueued);
    },
    reconciliationFinished() {
      reconcileEnqueued.set(0);
      reconciliations.inc();
    },
    jobAttempt(queue, outcome, durationSeconds) {
      jobDuration.observe({ queue, outcome }, durationSeconds);
      if (outcome === 'rate_limited') jobsRetried.inc({ queue, reason: outcome });
    },
    jobCompleted(queue) {
      jobsCompleted.inc({ queue });
    },
    jobFailed(queue, reason, final) {
      if (final) jobsFailed.inc({ queue, reason });
      else jobsRetried.inc({ queue, reason });
    },
    watchQueues(queues) {
      watched = queues;
      // Series that exist from the start, at 0, so that rate() and alerts see them at once.
      for (const { name: queue } of queues) {
        jobsCompleted.inc({ queue }, 0);
        for (const reason of ['unrecoverable', 'error']) jobsFailed.inc({ queue, reason }, 0);
        for (const reason of ['rate_limited', 'error']) jobsRetried.inc({ queue, reason }, 0);
      }
    },
    scrape() {
      return registry.metrics();
    },
  };
}
