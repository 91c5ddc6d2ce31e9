/**
 * Prometheus metrics of one worker, in its own registry so that workers can run side by side.
 * Labels are bounded sets, never a consumer or job id. Here the edges: API, intake, webhooks.
 */
import { Counter, collectDefaultMetrics, Histogram, Registry } from 'prom-client';
import { jobMetrics, scrapedGauge, workerMetrics } from './metrics-jobs.js';

export type { FailureReason } from './metrics-jobs.js';

export type JobMetrics = ReturnType<typeof jobMetrics>;
export type WorkerMetrics = Omit<ReturnType<typeof workerMetrics>, 'watchQueues'>;
export type IntakeMetrics = ReturnType<typeof intakeMetrics>;
/** Delivery jobs count as jobs of their queue too. */
export type WebhookMetrics = Pick<ReturnType<typeof webhookMetrics>, 'webhookDelivery'> &
  Pick<WorkerMetrics, 'jobCompleted' | 'jobFailed'>;
export type Metrics = ReturnType<typeof createMetrics>;

/** Gauges named like counters, which `promtool check metrics` refuses; each sums a kept gauge. */
const lintFailingDefaults = [
  'nodejs_active_handles_total',
  'nodejs_active_requests_total',
  'nodejs_active_resources_total',
];

export function createMetrics(options: { defaultMetrics?: boolean } = {}) {
  const registry = new Registry();
  if (options.defaultMetrics ?? true) {
    collectDefaultMetrics({ register: registry });
    for (const name of lintFailingDefaults) registry.removeSingleMetric(name);
  }
  const registers = [registry];
  return {
    registry,
    ...workerMetrics(registers),
    apiHooks: apiMetrics(registers),
    ...jobMetrics(registers),
    ...intakeMetrics(registers),
    ...webhookMetrics(registers),
    /** Read the API client's concurrency limit at every scrape. */
    watchApiConcurrency: scrapedGauge(
      'perks_worker_api_concurrency_limit',
      'Requests to the Perks API this process lets be in flight at once: it adapts below PERKS_CONNECTIONS, growing while answers keep their speed, shrinking as they slow and on 429, 5xx and timeouts.',
      registers,
    ),
    scrape: () => registry.metrics(),
  };
}

/** The PerksClient hooks. */
function apiMetrics(registers: Registry[]) {
  const duration = new Histogram({
    name: 'perks_worker_api_request_duration_seconds',
    help: 'Duration of one HTTP exchange with the Perks API, per operation and status class.',
    labelNames: ['operation', 'status_class'] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers,
  });
  const throttled = new Counter({
    name: 'perks_worker_api_throttled_total',
    help: 'Responses 429 (throttled) from the Perks API, per operation.',
    labelNames: ['operation'] as const,
    registers,
  });
  const retryWaits = new Counter({
    name: 'perks_worker_api_retry_waits_total',
    help: 'Waits before another try of an API call (backoff after a 5xx or transport error, or a short 429 wait), per operation.',
    labelNames: ['operation'] as const,
    registers,
  });
  const retryWaitSeconds = new Counter({
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
  return {
    onRequest(event: { operation: string; status: number | undefined; durationMs: number }) {
      const { operation, status, durationMs } = event;
      const known = status !== undefined && status >= 200 && status <= 599;
      const statusClass = known ? `${Math.floor(status / 100)}xx` : 'error';
      duration.observe({ operation, status_class: statusClass }, durationMs / 1000);
      if (status === 429) throttled.inc({ operation });
    },
    onTokenMinted: () => tokensMinted.inc(),
    onRetry({ operation, delayMs }: { operation: string; delayMs: number }) {
      retryWaits.inc({ operation });
      retryWaitSeconds.inc({ operation }, delayMs / 1000);
    },
  };
}

export type IntakeSource = 'http' | 'outbox' | 'amqp';
/** accepted: a job was added; duplicate: one was already pending; rejected: invalid input. */
export type IntakeOutcome = 'accepted' | 'duplicate' | 'rejected';

export function intakeMetrics(registers: Registry[]) {
  const events = new Counter({
    name: 'perks_worker_intake_events_total',
    help: 'Signups and sync requests received by the intake, per source (http, outbox, amqp) and outcome (accepted, duplicate: one was already pending, rejected: invalid).',
    labelNames: ['source', 'outcome'] as const,
    registers,
  });
  for (const source of ['http', 'outbox', 'amqp']) {
    for (const outcome of ['accepted', 'duplicate', 'rejected']) events.inc({ source, outcome }, 0);
  }
  return {
    intake: (source: IntakeSource, outcome: IntakeOutcome, count = 1) =>
      events.inc({ source, outcome }, count),
  };
}

export function webhookMetrics(registers: Registry[]) {
  const deliveries = new Counter({
    name: 'perks_worker_webhook_deliveries_total',
    help: 'Reward events POSTed to WEBHOOK_URL, per outcome: delivered (2xx), retried (refused or no answer; tried again with backoff), failed (given up after WEBHOOK_MAX_AGE_HOURS).',
    labelNames: ['outcome'] as const,
    registers,
  });
  const watchLag = scrapedGauge(
    'perks_worker_webhook_oldest_undelivered_seconds',
    'Age of the oldest reward event not yet delivered to WEBHOOK_URL (0 when none), read from PostgreSQL at scrape time; absent without webhooks.',
    registers,
  );
  return {
    webhookDelivery: (outcome: 'delivered' | 'retried' | 'failed') => deliveries.inc({ outcome }),
    /** Read the age of the oldest undelivered event at every scrape (seconds; 0 when none). */
    watchDeliveryLag(read: () => Promise<number>) {
      watchLag(read);
      for (const outcome of ['delivered', 'retried', 'failed']) deliveries.inc({ outcome }, 0);
    },
  };
}
