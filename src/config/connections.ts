/** Where the queues and the datastore are (see define.ts). */
import { z } from 'zod';
import { schemaPattern } from '../store/identifier.js';
import { commaList, group, matches, serviceUrl, variable, wholeNumber } from './define.js';

const postgresUrl = serviceUrl(/^postgres(ql)?$/, 'must be a postgres:// URL');
const redisUrl = serviceUrl(/^rediss?$/, 'must be a redis:// or rediss:// URL').refine(
  (url) => !URL.canParse(url) || /^\/?\d*$/.test(new URL(url).pathname),
  {
    error: 'must name its database by number (redis://host:6379/0), if at all',
  },
);
const prefix = matches(/^[{}A-Za-z0-9_.-]{1,64}$/, 'must be 1 to 64 of A-Z a-z 0-9 _ . - { }');
const identifier = matches(schemaPattern, 'must be a lower-case SQL identifier, not pg_…');
const hostPorts = 'must be a comma list of host:port';

const hostPort = matches(/^[A-Za-z0-9.-]+:\d{1,5}$/, hostPorts)
  .transform((node) => {
    const at = node.lastIndexOf(':');
    return { host: node.slice(0, at), port: Number(node.slice(at + 1)) };
  })
  .refine((node) => node.port >= 1 && node.port <= 65535, { error: 'has a port past 1 to 65535' });
/** `host:port,host:port` into `{ host, port }` pairs. */
const clusterNodes = z
  .string()
  .transform(commaList)
  .pipe(z.array(hostPort).min(1, { error: hostPorts }));

export const redisVariables = group('redis', {
  REDIS_URL: variable('url', redisUrl, {
    default: 'redis://127.0.0.1:6379',
    doc: 'Redis holding the BullMQ queues (`redis://` or `rediss://`).',
  }),
  REDIS_CLUSTER_NODES: variable('clusterNodes', clusterNodes.optional(), {
    example: '10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379',
    doc: 'Redis Cluster seed nodes: every connection becomes an ioredis Cluster (REDIS_URL then gives only the user, password and TLS). `QUEUE_PREFIX` must be hash-tagged, e.g. `{perks}`.',
  }),
  QUEUE_PREFIX: variable('queuePrefix', prefix, {
    default: 'perks',
    doc: 'Prefix of every queue key. Wrap it in braces (`{perks}`) for Redis Cluster.',
  }),
});

export const databaseVariables = group('database', {
  DATABASE_URL: variable('url', postgresUrl, {
    default: 'postgres://postgres@127.0.0.1:5432/perks',
    doc: 'PostgreSQL datastore the rewards are written to (created by `migrate` if missing).',
  }),
  DATABASE_DIRECT_URL: variable('directUrl', postgresUrl.optional(), {
    example: 'postgres://postgres@10.0.0.5:5432/perks',
    doc: "A direct connection to PostgreSQL, not through PgBouncer: the outbox's LISTEN, which needs a session, and the migrations use it (only a direct connection creates a missing database). The rest works through transaction pooling. Unset: `DATABASE_URL`.",
  }),
  DATABASE_SCHEMA: variable('schema', identifier, {
    default: 'perks',
    doc: 'Schema holding the perks tables.',
  }),
  DATABASE_POOL_SIZE: variable('poolSize', wholeNumber(1, 200), {
    default: '10',
    doc: 'Connections in the PostgreSQL pool of one process (1 to 200).',
  }),
});
