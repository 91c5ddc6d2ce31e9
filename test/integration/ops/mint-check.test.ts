/**
 * The readiness check of the Perks API: this replica's own mints, and the outage records in
 * Redis of credentials refused. With Redis away it says what this replica's own mints say, not
 * "unreachable" for an API that answers; another replica's failure that is no refusal (its URL,
 * its network) is that replica's.
 */
import { pino } from 'pino';
import { afterAll, expect, it } from 'vitest';
import { MintOutage } from '../../../src/jobs/mint-outage.js';
import { WorkerPauses } from '../../../src/jobs/pauses.js';
import { within } from '../../../src/ops/timeouts.js';
import { TokenMintError } from '../../../src/perks/errors.js';
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
  cleanups.push(
    () => proxy.close(),
    async () => redis.disconnect(),
  );
  let mint = async () => {};
  const outage = new MintOutage({
    redis,
    prefix,
    logger: pino({ level: 'silent' }),
    mint: () => mint(),
    credentials: { current: () => ({ clientId: 'client-1', clientSecret: 'sk_test_x' }) },
    name: () => 'client-1',
    pauses: new WorkerPauses(),
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
    .toBe('token mint failing (503)');
});

it('another replica’s failing mint: not ready only when the endpoint refused the credentials', async () => {
  const redis = createRedisConnection({ url: redisUrl }, 'worker');
  await connected(redis);
  const { prefix } = testQueuePrefix();
  cleanups.push(async () => redis.disconnect());
  const replica = (mint: () => Promise<void>) =>
    new MintOutage({
      redis,
      prefix,
      logger: pino({ level: 'silent' }),
      mint,
      credentials: { current: () => ({ clientId: 'client-1', clientSecret: 'sk_test_x' }) },
      name: () => 'client-1',
      pauses: new WorkerPauses(),
    });
  const failing = (status: number) => async () => {
    throw new TokenMintError(`mintToken: HTTP ${status}`, { operation: 'mintToken', status });
  };
  const healthy = replica(async () => {});
  const misrouted = replica(failing(404));
  cleanups.push(() => misrouted.close());
  expect(await misrouted.probe()).toBe(false);
  await expect(misrouted.check()).rejects.toThrow('token mint failing (404)');
  // Recorded for `status`, and the healthy replica stays ready.
  expect(await redis.hget(`${prefix}:perks:mint-failures`, 'client-1')).toContain('"404"');
  await expect(healthy.check()).resolves.toBeUndefined();

  const refused = replica(failing(401));
  cleanups.push(() => refused.close());
  expect(await refused.probe()).toBe(false);
  await expect(healthy.check()).rejects.toThrow('credentials refused (401)');
});
