/**
 * Webhook delivery of the reward_events feed (WEBHOOK_URL and WEBHOOK_SECRET set) on the BullMQ
 * queue `webhooks`: each replica's dispatcher adds a `deliver-events` job per pending consumer,
 * deduplicated by consumer so its events never go in parallel or out of order. The job POSTs
 * them in feed order, moving the cursor past each 2xx; a refusal fails the attempt (retried)
 * while other consumers go on, until WEBHOOK_MAX_AGE_HOURS of refusals mark the event failed
 * (counted from its recording or, if later, the first refusal of the job's streak). At least
 * once: a crash between a POST and its cursor move resends (receivers dedupe on `webhook-id`).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { type Job, type MinimalJob, type Queue, Worker } from 'bullmq';
import type pg from 'pg';
import type { Config } from '../config.js';
import type { Logger } from '../ops/logger.js';
import type { Metrics, WebhookMetrics } from '../ops/metrics.js';
import { outageLogger } from '../ops/outage.js';
import { within } from '../ops/timeouts.js';
import { queueNames } from '../queues/names.js';
import { maxStalledCount } from '../queues/queues.js';
import type { RedisClient } from '../redis/connection.js';
import {
  advanceCursor,
  clearPendingIfDone,
  deliveryLag,
  dispatchPending,
  recordFailure,
  undeliveredEvents,
} from '../store/event-deliveries.js';
import { quoteIdentifier } from '../store/identifier.js';
import type { Store } from '../store/store.js';
import { WebhookSender } from './webhook.js';

export const deliverJobName = 'deliver-events';

export type DeliveryJobData = {
  consumerId: string;
  /** The job's attempts when an event last went (delivered or given up): failures count since. */
  attemptsBefore?: number;
  /** When the receiver began refusing the job's next event (ISO), cleared once it is delivered or given up. */
  refusedSince?: string;
  /** That event's id: a replay rewinding the cursor meanwhile makes another one next. */
  refusedEventId?: string;
};

export type Webhooks = { close(): Promise<void> };

/** What delivery works with: the feed's pool and schema, the worker's Redis and webhooks queue. */
export interface WebhookParts {
  store: Pick<Store, 'pool' | 'schema'>;
  connection: RedisClient;
  queue: Queue<DeliveryJobData>;
  logger: Logger;
  metrics: WebhookMetrics & Pick<Metrics, 'watchDeliveryLag'>;
}

export function startWebhooks(
  config: Pick<Config, 'events' | 'redis' | 'worker'>,
  { store, connection, queue, logger, metrics }: WebhookParts,
): Webhooks | undefined {
  const { webhookUrl: url, webhookSecret: secret, webhookConcurrency: concurrency } = config.events;
  if (!url || !secret) return undefined;
  const { pool } = store;
  const schema = quoteIdentifier(store.schema);
  const prefix = config.redis.queuePrefix;
  const { webhookTimeoutMs: timeoutMs, webhookMaxAgeHours } = config.events;
  const sender = new WebhookSender({ url, secret, timeoutMs, connections: concurrency });
  const maxAgeMs = webhookMaxAgeHours * 3_600_000;
  const parts = { pool, schema, sender, maxAgeMs, logger, metrics, connection, prefix, queue };
  const delivery = startWebhookDelivery({ ...parts, concurrency, lockMs: config.worker.jobLockMs });
  metrics.watchDeliveryLag(async () => {
    const lag = await deliveryLag(pool, schema);
    return lag.oldest ? (Date.now() - lag.oldest.createdAt.getTime()) / 1000 : 0;
  });
  return {
    async close() {
      await within(10_000, delivery.close());
      await within(5000, sender.close());
    },
  };
}

export interface WebhookDeliveryOptions {
  pool: pg.Pool;
  /** Quoted schema name. */
  schema: string;
  sender: Pick<WebhookSender, 'send'>;
  maxAgeMs: number;
  logger: Logger;
  metrics: WebhookMetrics;
  connection: RedisClient;
  prefix: string;
  queue: Queue<DeliveryJobData>;
  concurrency: number;
  /** JOB_LOCK_MS: a dead replica's delivery job goes to another after about this long. */
  lockMs: number;
  /** How often the dispatcher looks for consumers with new events. Default 500 ms. */
  pollMs?: number;
}

/** Retried until delivered or given up by age (WEBHOOK_MAX_AGE_HOURS), never by count. */
const deliveryJobOptions = {
  attempts: 1_000_000,
  backoff: { type: 'custom' },
  removeOnComplete: { count: 1000 },
  removeOnFail: { count: 10_000 },
};

/** Events read per query; a job goes on until the consumer has none left. */
const eventsPerRead = 100;

/**
 * Delays between attempts of a delivery job: 1 s doubling to 5 min, with jitter, by the failed
 * attempts since an event last went. Not by all the job's attempts: one job delivers a consumer
 * for long, and a refusal after a delivery must start again at 1 s.
 */
export const deliveryBackoff = (
  attempts: number,
  _type?: string,
  _error?: Error,
  job?: MinimalJob,
) => {
  const before = (job?.data as DeliveryJobData | undefined)?.attemptsBefore ?? 0;
  const failures = Math.max(attempts - before, 1);
  const base = Math.min(1000 * 2 ** (failures - 1), 5 * 60_000);
  return Math.round(base * (0.8 + Math.random() * 0.4));
};

/** An event went: the refusal streak, if any, ends, and the backoff starts again. */
async function wentOn(job: Job<DeliveryJobData>): Promise<void> {
  const { consumerId, refusedSince, attemptsBefore = 0 } = job.data;
  if (refusedSince || job.attemptsMade > attemptsBefore) {
    await job.updateData({ consumerId, attemptsBefore: job.attemptsMade });
  }
}

/** Delivers the consumer's undelivered events in order; throws on the first refusal. */
async function deliverConsumerEvents(
  job: Job<DeliveryJobData>,
  ctx: WebhookDeliveryOptions,
  signal?: AbortSignal,
): Promise<{ delivered: number; failed: number }> {
  const { consumerId } = job.data;
  let delivered = 0;
  let failed = 0;
  for (;;) {
    const events = await undeliveredEvents(ctx.pool, ctx.schema, consumerId, eventsPerRead);
    if (events.length === 0) break;
    for (const event of events) {
      // A job whose lock was lost (cancelled) stops before its next POST: another replica
      // now delivers this consumer, and two must never interleave.
      signal?.throwIfAborted();
      try {
        await ctx.sender.send(event, signal);
      } catch (error) {
        // Cancelled (its lock lost, or the shutdown's grace over): no refusal, never a give-up;
        // the job runs again, here or on the replica that holds it now.
        if (signal?.aborted) throw error;
        // The age counts from the later of the event's recording and the start of its own
        // refusals: an old event (a replay, a long stop) is tried for the whole age too, and so
        // is one a replay put before the event that was being refused.
        const streak = job.data.refusedEventId === event.id ? job.data.refusedSince : undefined;
        const refusedSince = streak ?? new Date().toISOString();
        const from = Math.max(event.created_at.getTime(), Date.parse(refusedSince));
        if (Date.now() - from < ctx.maxAgeMs) {
          if (!streak) {
            // Its tries count from this one (the backoff, and its failure row's attempts).
            const attemptsBefore = job.attemptsMade;
            const data = { ...job.data, refusedSince, refusedEventId: event.id, attemptsBefore };
            await job.updateData(data);
          }
          ctx.metrics.webhookDelivery('retried');
          throw error;
        }
        // Refused for WEBHOOK_MAX_AGE_HOURS: given up, so the next events go.
        const message = error instanceof Error ? error.message : String(error);
        // This event's tries: the job's since an event last went.
        const attempts = job.attemptsMade + 1 - (job.data.attemptsBefore ?? 0);
        await recordFailure(ctx.pool, ctx.schema, event, { attempts, lastError: message });
        // The refusals of the next event are its own: it gets the whole age too.
        await wentOn(job);
        ctx.metrics.webhookDelivery('failed');
        ctx.logger.error(
          { consumerId, eventId: event.id, type: event.type, err: { message } },
          'webhook delivery given up; the event is marked failed',
        );
        failed += 1;
        continue;
      }
      await advanceCursor(ctx.pool, ctx.schema, consumerId, event.id);
      await wentOn(job);
      ctx.metrics.webhookDelivery('delivered');
      delivered += 1;
    }
  }
  await clearPendingIfDone(ctx.pool, ctx.schema, consumerId);
  return { delivered, failed };
}

/** Starts the delivery worker and this replica's dispatcher; `close` stops both. */
export function startWebhookDelivery(options: WebhookDeliveryOptions): Webhooks {
  const { logger } = options;
  const worker = new Worker<DeliveryJobData>(
    queueNames.webhooks,
    (job, _token, signal) => deliverConsumerEvents(job, options, signal),
    {
      connection: options.connection,
      prefix: options.prefix,
      concurrency: options.concurrency,
      lockDuration: options.lockMs,
      stalledInterval: options.lockMs,
      maxStalledCount,
      settings: { backoffStrategy: deliveryBackoff },
    },
  );
  const workerOutage = outageLogger(logger, 'webhook worker error', 'error');
  worker.on('error', workerOutage.error);
  // A job whose lock could not be renewed (Redis away longer than JOB_LOCK_MS) may already run
  // on another replica: cancel it here, so that it stops before its next POST.
  worker.on('lockRenewalFailed', (jobIds: string[]) => {
    for (const id of jobIds) worker.cancelJob(id, 'lock lost');
  });
  worker.on('completed', (job) => options.metrics.jobCompleted(job.queueName));
  worker.on('failed', (job, { message }) => {
    if (!job) return;
    options.metrics.jobFailed(job.queueName, 'error', job.finishedOn !== undefined);
    const fields = { consumerId: job.data.consumerId, attempt: job.attemptsMade, err: { message } };
    logger.warn(fields, 'webhook delivery refused; will retry');
  });

  const closing = new AbortController();
  const dispatchOutage = outageLogger(logger, 'webhook dispatch failed; retrying');
  const dispatch = async (consumerIds: string[]) => {
    const jobs = consumerIds.map((consumerId) => ({
      name: deliverJobName,
      data: { consumerId },
      opts: { ...deliveryJobOptions, deduplication: { id: consumerId, keepLastIfActive: true } },
    }));
    await options.queue.addBulk(jobs);
  };
  const loop = (async () => {
    const pollMs = options.pollMs ?? 500;
    while (!closing.signal.aborted) {
      try {
        while ((await dispatchPending(options.pool, options.schema, 1000, dispatch)) === 1000) {}
        dispatchOutage.recovered();
      } catch (error) {
        dispatchOutage.error(error);
      }
      await sleep(pollMs, undefined, { signal: closing.signal }).catch(() => {});
    }
  })();

  return {
    async close() {
      closing.abort();
      await loop;
      await worker.close();
    },
  };
}
