/** `check`'s Redis, PostgreSQL and schema lines. */
import pg from 'pg';
import { type DatabaseConfig, type RedisConfig, redactUrl } from '../config.js';
import { within, withTimeout } from '../ops/timeouts.js';
import { connected, createRedisConnection, pingQueueStore } from '../redis/connection.js';
import { MigrationChecksumError } from '../store/errors.js';
import { quoteIdentifier } from '../store/identifier.js';
import { assertUnchanged, loadMigrationFiles, type MigrationFile } from '../store/migrate.js';
import {
  type CheckResult,
  checkTimeoutMs,
  describeError,
  errorCode,
  fail,
  pass,
  skip,
} from './check-result.js';

export async function checkRedis(config: RedisConfig): Promise<CheckResult> {
  const target = config.clusterNodes
    ? `cluster ${config.clusterNodes.map((n) => `${n.host}:${n.port}`).join(',')}`
    : redactUrl(config.url);
  // The producer role fails fast instead of queueing commands while Redis is away.
  const redis = createRedisConnection(config, 'producer', undefined, {
    connectTimeout: checkTimeoutMs,
  });
  try {
    await connected(redis, checkTimeoutMs);
    const [server, memory] = await withTimeout(
      Promise.all([redis.info('server'), redis.info('memory')]),
      checkTimeoutMs,
    );
    await withTimeout(pingQueueStore(redis, config.queuePrefix), checkTimeoutMs);
    const version = /^redis_version:(\S+)/m.exec(server)?.[1] ?? 'version unknown';
    const policy = /^maxmemory_policy:(\S+)/m.exec(memory)?.[1];
    if (policy && policy !== 'noeviction') {
      return fail(
        'redis',
        target,
        `reachable (${version}), but maxmemory-policy is ${policy}`,
        'set maxmemory-policy noeviction: with eviction, Redis may drop queued jobs',
      );
    }
    return pass('redis', target, `reachable (${version})`);
  } catch (error) {
    const message = describeError(error);
    const refused = /NOAUTH|WRONGPASS|NOPERM/.test(message);
    return fail(
      'redis',
      target,
      `${refused ? 'refused' : 'unreachable'} (${message})`,
      refused
        ? 'check the user and password in REDIS_URL'
        : config.clusterNodes
          ? 'start the cluster, or correct REDIS_CLUSTER_NODES'
          : 'start Redis, or correct REDIS_URL',
    );
  } finally {
    redis.disconnect();
  }
}

/** The server's line, then the schema's (skipped when the server cannot be reached). */
export async function checkDatabase(config: DatabaseConfig): Promise<[CheckResult, CheckResult]> {
  const target = redactUrl(config.url);
  const unreachable = (error: unknown): [CheckResult, CheckResult] => [
    databaseFailure('postgres', target, 'DATABASE_URL', error),
    skip('schema', config.schema, 'not checked (PostgreSQL unreachable)'),
  ];
  let client: pg.Client;
  try {
    client = await connect(config.url);
  } catch (error) {
    return unreachable(error);
  }
  try {
    const version = await client.query<{ v: string }>(
      `select current_setting('server_version') as v`,
    );
    // `15.6 (Debian 15.6-0+deb12u1)`: the number is what matters.
    const number = version.rows[0]?.v.split(' ')[0] ?? 'version unknown';
    const server = pass('postgres', target, `reachable (${number})`);
    return [server, await checkSchema(client, config.schema)];
  } catch (error) {
    return unreachable(error);
  } finally {
    await within(checkTimeoutMs, client.end());
  }
}

/** DATABASE_DIRECT_URL, when set: `migrate` and the outbox's LISTEN need it. */
export async function checkDirectDatabase(url: string): Promise<CheckResult> {
  const target = redactUrl(url);
  try {
    const client = await connect(url);
    await within(checkTimeoutMs, client.end());
    return pass('postgres direct', target, 'reachable');
  } catch (error) {
    return databaseFailure('postgres direct', target, 'DATABASE_DIRECT_URL', error);
  }
}

/** A connected client; one that failed to connect is left to end on its own timeout. */
async function connect(url: string): Promise<pg.Client> {
  const client = new pg.Client({
    connectionString: url,
    // withTimeout answers first, with the same words as the other checks.
    connectionTimeoutMillis: checkTimeoutMs + 1000,
    query_timeout: checkTimeoutMs,
    application_name: 'perks-worker check',
  });
  // A connection dropped mid-check must not crash the process with an unhandled 'error'.
  client.on('error', () => undefined);
  try {
    await withTimeout(client.connect(), checkTimeoutMs);
    return client;
  } catch (error) {
    client.end().catch(() => undefined);
    throw error;
  }
}

function databaseFailure(
  name: string,
  target: string,
  variable: string,
  error: unknown,
): CheckResult {
  const code = errorCode(error);
  const detail = `unreachable (${describeError(error)})`;
  if (code === '3D000') {
    return fail(name, target, detail, 'run perks-worker migrate: it creates the database');
  }
  if (code === '28P01' || code === '28000') {
    return fail(name, target, detail, `check the user and password in ${variable}`);
  }
  return fail(name, target, detail, `start PostgreSQL, or correct ${variable}`);
}

async function checkSchema(client: pg.Client, schema: string): Promise<CheckResult> {
  let rows: { version: string; checksum: string }[];
  try {
    const result = await client.query<{ version: string; checksum: string }>(
      `select version, checksum from ${quoteIdentifier(schema)}.schema_migrations order by version`,
    );
    rows = result.rows;
  } catch (error) {
    // 42P01: no schema_migrations table; 3F000: no such schema.
    const code = errorCode(error);
    if (code !== '42P01' && code !== '3F000') {
      return fail(
        'schema',
        schema,
        `unreadable (${describeError(error)})`,
        'check DATABASE_SCHEMA',
      );
    }
    rows = [];
  }
  const files = await loadMigrationFiles();
  return schemaResult(schema, files, new Map(rows.map((r) => [r.version, r.checksum])));
}

/** Whether `applied` (version -> checksum, from schema_migrations) is what this build ships. */
export function schemaResult(
  schema: string,
  files: readonly MigrationFile[],
  applied: ReadonlyMap<string, string>,
): CheckResult {
  const migrate = 'run perks-worker migrate';
  for (const file of files) {
    const checksum = applied.get(file.version);
    if (checksum === undefined) continue;
    try {
      assertUnchanged(file, checksum);
    } catch (error) {
      if (!(error instanceof MigrationChecksumError)) throw error;
      return fail(
        'schema',
        schema,
        `migration ${file.file} differs from the one applied`,
        'run the release that applied it: a released migration is never edited, a new file is added',
      );
    }
  }
  const pending = files.filter((f) => !applied.has(f.version));
  if (applied.size === 0) {
    return fail('schema', schema, `not migrated (0 of ${files.length} migrations)`, migrate);
  }
  if (pending.length > 0) {
    const names = pending.map((f) => f.file).join(', ');
    const count = pending.length === 1 ? '1 migration' : `${pending.length} migrations`;
    return fail('schema', schema, `${count} pending (${names})`, migrate);
  }
  const current = [...applied.keys()].sort().at(-1) ?? '';
  const known = new Set(files.map((f) => f.version));
  const newer = [...applied.keys()].filter((v) => !known.has(v)).length;
  // Migrations only add: a schema a later release migrated further still serves this build.
  const note = newer > 0 ? `, ${newer} from a later release` : '';
  return pass('schema', schema, `migrated (at ${current}, ${applied.size} migrations${note})`);
}
