/**
 * Webhook delivery of the reward_events feed, on a BullMQ queue of its own (`webhooks`):
 * - each replica's dispatcher adds one `deliver-events` job per consumer marked pending,
 *   deduplicated by consumer, so one consumer's events are never delivered in parallel or out
 *   of order;
 * - the job POSTs them one at a time in feed order, moving the consumer's cursor past each 2xx;
 *   a refusal fails the attempt (retried, 1 s doubling to 5 min) while other consumers go on;
 * - an event still refused WEBHOOK_MAX_AGE_HOURS after it was recorded is marked failed and
 *   skipped. At least once: a crash between a POST and its cursor move sends that event again
 *   (receivers deduplicate on `webhook-id`).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { type Job, type Queue, Worker } from 'bullmq';
import type pg from 'pg';
import type { Logger } from '../ops/logger.js';
import type { WebhookMetrics } from '../ops/metrics.js';
import { oncePerOutage } from '../ops/outage.js';
import type { RedisClient } from '../redis/connection.js';
import {
  advanceCursor,
  clearPendingIfDone,
  dispatchPending,
  recordFailure,
  undeliveredEvents,
} from '../store/event-deliveries.js';
import type { WebhookSender } from './webhook.js';

export const webhookQueueName = 'webhooks';
export const deliverJobName = 'deliver-events';

/** What a delivery job carries. */
export interface DeliveryJobData {
  consumerId: string;
}

export interface DeliveryContext {
  pool: pg.Pool;
  /** Quoted schema name. */
  schema: string;
  sender: Pick<WebhookSender, 'send'>;
  maxAgeMs: number;
  logger: Logger;
  metrics: WebhookMetrics;
}

/** Events read per query; a job goes on until the consumer has none left. */
const eventsPerRead = 100;

/** Delays between attempts of a delivery job: 1 s doubling to 5 min, with jitter. */
function deliveryBackoff(attemptsMade: number): number {
  const base = Math.min(1000 * 2 ** Math.max(attemptsMade - 1, 0), 5 * 60_000);
  return Math.round(base * (0.8 + Math.random() * 0.4));
}

/** Delivers the consumer's undelivered events in order; throws on the first refusal. */
export async function deliverConsumerEvents(
  job: Job<DeliveryJobData>,
  ctx: DeliveryContext,
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
        if (Date.now() - event.created_at.getTime() < ctx.maxAgeMs) {
          ctx.metrics.webhookDelivery('retried');
          throw error;
        }
        // Refused WEBHOOK_MAX_AGE_HOURS after it was recorded: given up, so the next events go.
        await recordFailure(ctx.pool, ctx.schema, event, {
          attempts: job.attemptsMade + 1,
          lastError: (error as Error).message,
        });
        ctx.metrics.webhookDelivery('failed');
        ctx.logger.error(
          {
            consumerId,
            eventId: event.id,
            type: event.type,
            err: { message: (error as Error).message },
          },
          'webhook delivery given up; the event is marked failed',
        );
        failed += 1;
        continue;
      }
      await advanceCursor(ctx.pool, ctx.schema, consumerId, event.id);
      ctx.metrics.webhookDelivery('delivered');
      delivered += 1;
    }
  }
  await clearPendingIfDone(ctx.pool, ctx.schema, consumerId);
  return { delivered, failed };
}

export interface WebhookDeliveryOptions extends DeliveryContext {
  connection: RedisClient;
  prefix: string;
  queue: Queue<DeliveryJobData>;
  concurrency: number;
  /** JOB_LOCK_MS: a dead replica's delivery job goes to another after about this long. */
  lockMs: number;
  /** How often the dispatcher looks for consumers with new events. Default 500 ms. */
  pollMs?: number;
}

/** Starts the delivery worker and this replica's dispatcher; `close` stops both. */
export function startWebhookDelivery(options: WebhookDeliveryOptions): {
  close(): Promise<void>;
} {
  const { logger } = options;
  const worker = new Worker<DeliveryJobData>(
    webhookQueueName,
    (job, _token, signal) => deliverConsumerEvents(job, options, signal),
    {
      connection: options.connection,
      prefix: options.prefix,
      concurrency: options.concurrency,
      lockDuration: options.lockMs,
      stalledInterval: options.lockMs,
      settings: { backoffStrategy: (attemptsMade: number) => deliveryBackoff(attemptsMade) },
    },
  );
  const workerOutage = oncePerOutage((error) =>
    logger.error({ err: { message: error.message } }, 'webhook worker error'),
  );
  worker.on('error', workerOutage.error);
  // A job whose lock could not be renewed (Redis away longer than JOB_LOCK_MS) may already run
  // on another replica: cancel it here, so that it stops before its next POST.
  worker.on('lockRenewalFailed', (jobIds: string[]) => {
    for (const id of jobIds) worker.cancelJob(id, 'lock lost');
  });
  worker.on('failed', (job, error) => {
    if (!job) return;
    logger.warn(
      {
        consumerId: job.data.consumerId,
        attempt: job.attemptsMade,
        err: { message: error.message },
      },
      'webhook delivery refused; will retry',
    );
  });

  const closing = new AbortController();
  const dispatchOutage = oncePerOutage((error) =>
    logger.warn({ err: { message: error.message } }, 'webhook dispatch failed; retrying'),
  );
  const dispatch = async (consumerIds: string[]) => {
    await options.queue.addBulk(
      consumerIds.map((consumerId) => ({
        name: deliverJobName,
        data: { consumerId },
        opts: {
          deduplication: { id: consumerId, keepLastIfActive: true },
          // Retried until delivered or given up by age (WEBHOOK_MAX_AGE_HOURS), never by count.
          attempts: 1_000_000,
          backoff: { type: 'custom' },
          removeOnComplete: { count: 1000 },
          removeOnFail: { count: 10_000 },
        },
      })),
    );
  };
  const loop = (async () => {
    const pollMs = options.pollMs ?? 500;
    while (!closing.signal.aborted) {
      try {
        while ((await dispatchPending(options.pool, options.schema, 1000, dispatch)) === 1000) {}
        dispatchOutage.recovered();
      } catch (error) {
        dispatchOutage.error(error instanceof Error ? error : new Error(String(error)));
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
