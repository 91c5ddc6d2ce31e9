import { once } from 'node:events';
import { Cluster, type ClusterOptions, Redis, type RedisOptions } from 'ioredis';
import type { Logger } from '../ops/logger.js';

/** A connection to a single Redis or to a Redis Cluster: every command we use works on both. */
export type RedisClient = Redis | Cluster;

/** `url` alone, or a cluster's seed nodes with the user, password and TLS (rediss) of `url`. */
interface RedisTarget {
  url: string;
  /** REDIS_CLUSTER_NODES. The queue prefix must then be hash-tagged (`{perks}`). */
  clusterNodes?: readonly { host: string; port: number }[] | undefined;
}

// `worker` retries forever while Redis is away (BullMQ requires `maxRetriesPerRequest: null`);
// `producer` fails fast, so a caller enqueueing a signup learns at once that Redis is down.
type ConnectionRole = 'worker' | 'producer';

// Reconnect with a capped backoff instead of ioredis' unbounded growth.
const reconnectDelay = (times: number) => Math.min(times * 200, 5000);

export function createRedisConnection(
  target: RedisTarget,
  role: ConnectionRole,
  logger?: Logger,
  overrides: RedisOptions = {},
): RedisClient {
  const byRole: RedisOptions =
    role === 'worker'
      ? { maxRetriesPerRequest: null, enableReadyCheck: true }
      : { maxRetriesPerRequest: 1, enableOfflineQueue: false, connectTimeout: 5000 };
  const options = { ...byRole, ...overrides };
  const redis = target.clusterNodes
    ? new Cluster([...target.clusterNodes], clusterOptions(target.url, role, options))
    : new Redis(target.url, { retryStrategy: reconnectDelay, ...options });
  watchErrors(redis, role, logger);
  return redis;
}

// A master that stops answering gives connection errors, then MOVED or CLUSTERDOWN until a
// replica takes its slots: a worker's command retries without end, a producer's gives up.
function clusterOptions(url: string, role: ConnectionRole, options: RedisOptions): ClusterOptions {
  const { username, password, protocol } = new URL(url);
  const tls = protocol === 'rediss:';
  return {
    redisOptions: {
      ...options,
      ...(username ? { username: decodeURIComponent(username) } : {}),
      ...(password ? { password: decodeURIComponent(password) } : {}),
      ...(tls ? { tls: {} } : {}),
    },
    clusterRetryStrategy: reconnectDelay,
    ...(role === 'worker'
      ? { maxRedirections: Number.POSITIVE_INFINITY }
      : { enableOfflineQueue: false }),
    // TLS checks the certificate against the node's host name, not a resolved address.
    ...(tls ? { dnsLookup: (address, lookup) => lookup(null, address) } : {}),
  };
}

// An unhandled 'error' event would crash the process. Logs the first error of an outage and
// the recovery, per cluster node (a cluster stays ready while one master is away).
function watchErrors(redis: RedisClient, role: ConnectionRole, logger?: Logger): void {
  let everReady = false;
  const down = new Set<string>();
  const lost = (node: string, error: Error) => {
    // A producer that never connected reports that to its caller (see `connected`).
    if (down.has(node) || (role === 'producer' && !everReady)) return;
    down.add(node);
    const fields = { err: { message: error.message }, role, ...(node ? { node } : {}) };
    logger?.warn(fields, 'redis connection lost; retrying');
  };
  const ready = (node: string) => {
    everReady = true;
    if (down.delete(node))
      logger?.info({ role, ...(node ? { node } : {}) }, 'redis connection restored');
  };
  redis.on('error', (error: Error) => lost('', error));
  redis.on('ready', () => ready(''));
  if (redis instanceof Cluster) {
    redis.on('node error', (error: Error, node: string) => lost(node, error));
    redis.on('+node', (node: Redis) =>
      node.once('ready', () => ready(`${node.options.host}:${node.options.port}`)),
    );
  }
}

/** Resolves when the connection is ready; rejects at its first error or after `timeoutMs`. */
export async function connected(redis: RedisClient, timeoutMs = 5000): Promise<void> {
  if (redis.status === 'ready') return;
  const signal = AbortSignal.timeout(timeoutMs);
  await once(redis, 'ready', { signal }).catch((error: unknown) => {
    throw signal.aborted ? new Error(`no answer within ${timeoutMs} ms`) : error;
  });
}

/** Deletes every key under `prefix` (`<prefix>:*`), a batch of SCAN at a time, on every master. */
export async function deletePrefix(redis: RedisClient, prefix: string): Promise<void> {
  // A cluster knows its masters once it is ready.
  if (redis instanceof Cluster) await connected(redis);
  for (const node of redis instanceof Cluster ? redis.nodes('master') : [redis]) {
    let cursor = '0';
    do {
      const [next, keys] = await node.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000);
      // One key a command: a cluster refuses a command across slots.
      await Promise.all(keys.map((key) => node.unlink(key)));
      cursor = next;
    } while (cursor !== '0');
  }
}

/** For /readyz: a read under the prefix reaches the cluster master holding the queues' slot. */
export async function pingQueueStore(redis: RedisClient, prefix: string): Promise<void> {
  await redis.exists(`${prefix}:ready-probe`);
}
