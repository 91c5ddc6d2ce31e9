/**
 * Prometheus metrics of one worker, in a registry of its own so that workers can run side by
 * side. Labels are bounded sets only, never a consumer or job id (those belong in logs).
 */
import { Counter, collectDefaultMetrics, Histogram, Registry } from 'prom-client';
import { intakeMetrics, webhookMetrics } from './metrics-edges.js';
import { jobMetrics, workerMetrics } from './metrics-jobs.js';

export type { IntakeOutcome } from './metrics-edges.js';
export type { FailureReason } from './metrics-jobs.js';

export type JobMetrics = ReturnType<typeof jobMetrics>;
export type WorkerMetrics = Omit<ReturnType<typeof workerMetrics>, 'watchQueues'>;
export type IntakeMetrics = ReturnType<typeof intakeMetrics>;
export type WebhookMetrics = Pick<ReturnType<typeof webhookMetrics>, 'webhookDelivery'>;
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
    /** The text exposition, as served on /metrics. */
    scrape: () => registry.metrics(),
  };
}

const apiBuckets = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/** The PerksClient hooks. */
function apiMetrics(registers: Registry[]) {
  const duration = new Histogram({
    name: 'perks_worker_api_request_duration_seconds',
    help: 'Duration of one HTTP exchange with the Perks API, per operation and status class.',
    labelNames: ['operation', 'status_class'] as const,
    buckets: apiBuckets,
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
