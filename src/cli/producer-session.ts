import { loadConfig, redactUrl } from '../config.js';
import { OperationalError } from '../errors.js';
import { createLogger } from '../ops/logger.js';
import { createProducer, type Producer } from '../queues/producer.js';
import { producerGroups } from './program.js';

export type ProducerConfig = ReturnType<typeof loadConfig<(typeof producerGroups)[number]>>;

/** Runs `fn` with a fail-fast producer on the configured Redis, and closes it. */
export async function withProducer<T>(
  fn: (producer: Producer, config: ProducerConfig) => Promise<T>,
  config: ProducerConfig = loadConfig(producerGroups),
): Promise<T> {
  const producer = await createProducer({
    redisUrl: config.redis.url,
    clusterNodes: config.redis.clusterNodes,
    queuePrefix: config.redis.queuePrefix,
    consumerIdKey: config.consumerIds.key,
    jobPolicy: config.jobs,
    logger: createLogger(config.log),
  }).catch((error: unknown) => {
    const reason = `cannot reach Redis at ${redactUrl(config.redis.url)}: ${(error as Error).message}`;
    throw new OperationalError(reason, { cause: error });
  });
  try {
    return await fn(producer, config);
  } finally {
    await producer.close();
  }
}
