/**
 * The readiness check of the Perks API (the token mint's outage record in Redis): with Redis
 * away it says what this replica's own mints say, not "unreachable" for an API that answers.
 */
import { pino } from 'pino';
import { afterAll, expect, it } from 'vitest';
import { MintOutage } from '../../../src/jobs/mint-outage.js';
import { within } from '../../../src/ops/timeouts.js';
import { TokenMintError } from '../../../src/perks/errors.js';
import { closeQueues, defaultJobPolicy, openQueues } from '../../../src/queues/queues.js';
import { connected, createRedisConnection } from '../../../src/redis/connection.js';
import { testQueuePrefix } from '../../support/redis.js';
import { startTcpProxy, targetOf } from '../../support/tcp-proxy.js';

const redisUrl = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const cleanups: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
});

it('with Redis away, the API check follows this replica’s own mints', async () => {
  const proxy = await startTcpProxy(targetOf(redisUrl));
  // A worker's connection: its commands wait for Redis to come back, never failing fast.
  const redis = createRedisConnection({ url: proxy.urlFor(redisUrl) }, 'worker');
  await connected(redis);
  const { prefix } = testQueuePrefix();
  const queues = openQueues(redis, prefix, defaultJobPolicy);
  // Closed with Redis still away: bounded.
  cleanups.push(
    () => proxy.close(),
    async () => redis.disconnect(),
    () => within(1000, closeQueues(queues)),
  );
  let mint = async () => {};
  const outage = new MintOutage({
    redis,
    prefix,
    queues,
    logger: pino({ level: 'silent' }),
    mint: () => mint(),
    credentials: { current: () => ({ clientId: 'client-1', clientSecret: 'sk_test_x' }) },
    name: () => 'client-1',
  });
  cleanups.push(() => within(1000, outage.close()));
  await expect(outage.check()).resolves.toBeUndefined();

  proxy.pause();
  await expect(outage.check()).resolves.toBeUndefined();
  mint = async () => {
    throw new TokenMintError('mintToken: HTTP 503', { operation: 'mintToken', status: 503 });
  };
  // Its record would go to Redis: the probe waits for it, the check does not.
  void outage.probe();
  await expect
    .poll(() =>
      outage.check().then(
        () => 'ready',
        (error: Error) => error.message,
      ),
    )
    .toBe('token mint failing (this replica)');
});
