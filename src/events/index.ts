/**
 * Webhook delivery, on when WEBHOOK_URL and WEBHOOK_SECRET are set: the `webhooks` queue, its
 * worker and this replica's dispatcher (delivery.ts), and the delivery-lag gauge.
 */
import { Queue } from 'bullmq';
import type { Config } from '../config.js';
import type { Logger } from '../ops/logger.js';
import type { Metrics } from '../ops/metrics.js';
import { within } from '../ops/timeouts.js';
import type { RedisClient } from '../redis/connection.js';
import { deliveryLag } from '../store/event-deliveries.js';
import { quoteIdentifier } from '../store/identifier.js';
import type { Store } from '../store/store.js';
import { type DeliveryJobData, startWebhookDelivery, webhookQueueName } from './delivery.js';
import { WebhookSender } from './webhook.js';

export interface Webhooks {
  close(): Promise<void>;
}

/** What delivery works with: the feed's pool and schema, the worker's Redis connection. */
export interface WebhookParts {
  store: Pick<Store, 'pool' | 'schema'>;
  connection: RedisClient;
  logger: Logger;
  metrics: Pick<Metrics, 'webhookDelivery' | 'watchDeliveryLag'>;
}

export function startWebhooks(
  config: Pick<Config, 'events' | 'redis' | 'worker'>,
  { store, connection, logger, metrics }: WebhookParts,
): Webhooks | undefined {
  const { webhookUrl, webhookSecret, webhookTimeoutMs, webhookConcurrency } = config.events;
  if (!webhookUrl || !webhookSecret) return undefined;
  const schema = quoteIdentifier(store.schema);
  const queue = new Queue<DeliveryJobData>(webhookQueueName, {
    connection,
    prefix: config.redis.queuePrefix,
  });
  queue.on('error', () => {}); // the worker's connection logs its outages
  const sender = new WebhookSender({
    url: webhookUrl,
    secret: webhookSecret,
    timeoutMs: webhookTimeoutMs,
    connections: webhookConcurrency,
  });
  const delivery = startWebhookDelivery({
    pool: store.pool,
    schema,
    sender,
    maxAgeMs: config.events.webhookMaxAgeHours * 3_600_000,
    logger,
    metrics,
    connection,
    prefix: config.redis.queuePrefix,
    queue,
    concurrency: webhookConcurrency,
    lockMs: config.worker.jobLockMs,
  });
  metrics.watchDeliveryLag(async () => {
    const lag = await deliveryLag(store.pool, schema);
    return lag.oldest ? (Date.now() - lag.oldest.createdAt.getTime()) / 1000 : 0;
  });
  return {
    async close() {
      await within(10_000, delivery.close());
      await within(5000, queue.close());
      await within(5000, sender.close());
    },
  };
}
