/** Metrics of the edges: signups received by the intake, reward events sent to the webhook. */
import { Counter, Gauge, type Registry } from 'prom-client';
import { scrapeReadTimeoutMs } from './metrics-jobs.js';
import { withTimeout } from './timeouts.js';

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
  let readDeliveryLag: (() => Promise<number>) | undefined;
  new Gauge({
    name: 'perks_worker_webhook_oldest_undelivered_seconds',
    help: 'Age of the oldest reward event not yet delivered to WEBHOOK_URL (0 when none), read from PostgreSQL at scrape time; absent without webhooks.',
    registers,
    async collect() {
      if (!readDeliveryLag) return;
      try {
        this.set(await withTimeout(readDeliveryLag(), scrapeReadTimeoutMs));
      } catch {
        this.reset(); // PostgreSQL away or slow: left out of this scrape
      }
    },
  });
  return {
    webhookDelivery: (outcome: 'delivered' | 'retried' | 'failed') => deliveries.inc({ outcome }),
    /** Read the age of the oldest undelivered event at every scrape (seconds; 0 when none). */
    watchDeliveryLag(read: () => Promise<number>) {
      readDeliveryLag = read;
      for (const outcome of ['delivered', 'retried', 'failed']) deliveries.inc({ outcome }, 0);
    },
  };
}
