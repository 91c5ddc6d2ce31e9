/**
 * Webhook delivery in `work`, on when WEBHOOK_URL and WEBHOOK_SECRET are set: the `webhooks`
 * queue, its worker and this replica's dispatcher (delivery.ts), and the delivery-lag gauge.
 */
import { Queue } from 'bullmq';
import type { Config } from '../config.js';
import type { Runtime } from '../jobs/runtime.js';
import type { Logger } from '../ops/logger.js';
import { within } from '../ops/timeouts.js';
import { deliveryLag } from '../store/event-deliveries.js';
import { quoteIdentifier } from '../store/identifier.js';
import { type DeliveryJobData, startWebhookDelivery, webhookQueueName } from './delivery.js';
import { WebhookSender } from './webhook.js';

export interface Webhooks {
  close(): Promise<void>;
}

export function startWebhooks(
  config: Pick<Config, 'events' | 'redis' | 'database' | 'worker'>,
  runtime: Pick<Runtime, 'connection' | 'metrics' | 'ctx'>,
  logger: Logger,
): Webhooks | undefined {
  const { webhookUrl, webhookSecret } = config.events;
  if (!webhookUrl || !webhookSecret) return undefined;
  const schema = quoteIdentifier(config.database.schema);
  const pool = runtime.ctx.store.pool;
  const queue = new Queue<DeliveryJobData>(webhookQueueName, {
    connection: runtime.connection,
    prefix: config.redis.queuePrefix,
  });
  queue.on('error', () => {}); // the worker's connection logs its outages
  const sender = new WebhookSender({
    url: webhookUrl,
    secret: webhookSecret,
    timeoutMs: config.events.webhookTimeoutMs,
    connections: config.events.webhookConcurrency,
  });
  const delivery = startWebhookDelivery({
    pool,
    schema,
    sender,
    maxAgeMs: config.events.webhookMaxAgeHours * 3_600_000,
    logger,
    metrics: runtime.metrics,
    connection: runtime.connection,
    prefix: config.redis.queuePrefix,
    queue,
    concurrency: config.events.webhookConcurrency,
    lockMs: config.worker.jobLockMs,
  });
  runtime.metrics.watchDeliveryLag(async () => {
    const lag = await deliveryLag(pool, schema);
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
