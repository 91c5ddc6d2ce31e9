import { loadConfig, redactUrl } from '../config.js';
import { describeError, OperationalError } from '../errors.js';
import { createLogger } from '../ops/logger.js';
import { createProducer, type Producer } from '../queues/producer.js';
import { producerGroups } from './program.js';

export type ProducerConfig = ReturnType<typeof loadConfig<(typeof producerGroups)[number]>>;

/** A command's Redis is not there: one line, exit 1, the URL's password masked. */
export const redisUnreachable = (url: string, error: unknown) =>
  new OperationalError(`cannot reach Redis at ${redactUrl(url)}: ${describeError(error)}`, {
    cause: error,
  });

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
    throw redisUnreachable(config.redis.url, error);
  });
  try {
    return await fn(producer, config);
  } finally {
    await producer.close();
  }
}
