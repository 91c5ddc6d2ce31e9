/** `check`'s Redis, PostgreSQL and schema lines. */
import pg from 'pg';
import { type DatabaseConfig, type RedisConfig, redactUrl } from '../config.js';
import { describeError, errorCode } from '../errors.js';
import { within, withTimeout } from '../ops/timeouts.js';
import { connected, createRedisConnection, pingQueueStore } from '../redis/connection.js';
import { MigrationChecksumError } from '../store/errors.js';
import { quoteIdentifier } from '../store/identifier.js';
import {
  assertUnchanged,
  laterVersions,
  loadMigrationFiles,
  loadRepeatableFiles,
  type MigrationFile,
} from '../store/migrate.js';
import type { CheckResult } from './check-result.js';
import * as line from './check-result.js';

const timeoutMs = line.checkTimeoutMs;

export async function checkRedis(config: RedisConfig): Promise<CheckResult> {
  const target = config.clusterNodes
    ? `cluster ${config.clusterNodes.map((n) => `${n.host}:${n.port}`).join(',')}`
    : redactUrl(config.url);
  // The producer role fails fast instead of queueing commands while Redis is away.
  const redis = createRedisConnection(config, 'producer', undefined, { connectTimeout: timeoutMs });
  try {
    await connected(redis, timeoutMs);
    const info = Promise.all([redis.info('server'), redis.info('memory')]);
    const [server, memory] = await withTimeout(info, timeoutMs);
    await withTimeout(pingQueueStore(redis, config.queuePrefix), timeoutMs);
    const version = /^redis_version:(\S+)/m.exec(server)?.[1] ?? 'version unknown';
    const policy = /^maxmemory_policy:(\S+)/m.exec(memory)?.[1];
    if (!policy || policy === 'noeviction')
      return line.pass('redis', target, `reachable (${version})`);
    const detail = `reachable (${version}), but maxmemory-policy is ${policy}`;
    const fix = 'set maxmemory-policy noeviction: with eviction, Redis may drop queued jobs';
    return line.fail('redis', target, detail, fix);
  } catch (error) {
    const message = describeError(error);
    const refused = /NOAUTH|WRONGPASS|NOPERM/.test(message);
    const fix = refused
      ? 'check the user and password in REDIS_URL'
      : config.clusterNodes
        ? 'start the cluster, or correct REDIS_CLUSTER_NODES'
        : 'start Redis, or correct REDIS_URL';
    return line.fail('redis', target, `${refused ? 'refused' : 'unreachable'} (${message})`, fix);
  } finally {
    redis.disconnect();
  }
}

/** The server's line, then the schema's (skipped when the server cannot be reached). */
export async function checkDatabase(config: DatabaseConfig): Promise<[CheckResult, CheckResult]> {
  const target = redactUrl(config.url);
  let client: pg.Client | undefined;
  try {
    client = await connect(config.url);
    const version = await client.query<{ v: string }>(
      `select current_setting('server_version') as v`,
    );
    // `15.6 (Debian 15.6-0+deb12u1)`: the number is what matters.
    const number = version.rows[0]?.v.split(' ')[0] ?? 'version unknown';
    const server = line.pass('postgres', target, `reachable (${number})`);
    return [server, await checkSchema(client, config.schema)];
  } catch (error) {
    return [
      databaseFailure('postgres', target, 'DATABASE_URL', error),
      line.skip('schema', config.schema, 'not checked (PostgreSQL unreachable)'),
    ];
  } finally {
    if (client) await within(timeoutMs, client.end());
  }
}

/** DATABASE_DIRECT_URL, when set: `migrate` and the outbox's LISTEN need it. */
export async function checkDirectDatabase(url: string): Promise<CheckResult> {
  const target = redactUrl(url);
  try {
    const client = await connect(url);
    await within(timeoutMs, client.end());
    return line.pass('postgres direct', target, 'reachable');
  } catch (error) {
    return databaseFailure('postgres direct', target, 'DATABASE_DIRECT_URL', error);
  }
}

/** A connected client; one that failed to connect is left to end on its own timeout. */
async function connect(url: string): Promise<pg.Client> {
  const client = new pg.Client({
    connectionString: url,
    // withTimeout answers first, with the same words as the other checks.
    connectionTimeoutMillis: timeoutMs + 1000,
    query_timeout: timeoutMs,
    application_name: 'perks-worker check',
  });
  // A connection dropped mid-check must not crash the process with an unhandled 'error'.
  client.on('error', () => undefined);
  await withTimeout(client.connect(), timeoutMs).catch((error: unknown) => {
    client.end().catch(() => undefined);
    throw error;
  });
  return client;
}

function databaseFailure(name: string, target: string, variable: string, error: unknown) {
  const fixes: Record<string, string> = {
    '3D000': 'run perks-worker migrate: it creates the database',
    '28P01': `check the user and password in ${variable}`,
    '28000': `check the user and password in ${variable}`,
  };
  const fix = fixes[errorCode(error) ?? ''] ?? `start PostgreSQL, or correct ${variable}`;
  return line.fail(name, target, `unreachable (${describeError(error)})`, fix);
}

async function checkSchema(client: pg.Client, schema: string): Promise<CheckResult> {
  const applied = new Map<string, string>();
  const functions = new Map<string, string>();
  try {
    const q = quoteIdentifier(schema);
    const numbered = await client.query<{ version: string; checksum: string }>(
      `select version, checksum from ${q}.schema_migrations order by version`,
    );
    for (const row of numbered.rows) applied.set(row.version, row.checksum);
    // Read apart: a schema of a release before the repeatable migrations has no such table.
    const repeatable = await client.query<{ file: string; checksum: string }>(
      `select file, checksum from ${q}.schema_repeatable_migrations`,
    );
    for (const row of repeatable.rows) functions.set(row.file, row.checksum);
  } catch (error) {
    // 42P01: no schema_migrations table; 3F000: no such schema. Both: nothing applied.
    if (!['42P01', '3F000'].includes(errorCode(error) ?? '')) {
      const detail = `unreadable (${describeError(error)})`;
      return line.fail('schema', schema, detail, 'check DATABASE_SCHEMA');
    }
  }
  const files = await loadMigrationFiles();
  const result = schemaResult(schema, files, applied);
  // The functions (migrations/repeatable/) are this build's only once `migrate` has run it;
  // those of a later release's schema are that release's, which this build's migrate keeps.
  if (!result.ok || applied.size === 0 || laterVersions(files, applied).length > 0) return result;
  const stale = (await loadRepeatableFiles()).filter((f) => functions.get(f.file) !== f.checksum);
  if (stale.length === 0) return result;
  const detail = `functions not this build's (${stale.map((f) => f.file).join(', ')})`;
  return line.fail('schema', schema, detail, 'run perks-worker migrate');
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
    try {
      if (checksum !== undefined) assertUnchanged(file, checksum);
    } catch (error) {
      if (!(error instanceof MigrationChecksumError)) throw error;
      const detail = `migration ${file.file} differs from the one applied`;
      const fix =
        'run the release that applied it: a released migration is never edited, a new file is added';
      return line.fail('schema', schema, detail, fix);
    }
  }
  const pending = files.filter((f) => !applied.has(f.version));
  if (applied.size === 0) {
    return line.fail('schema', schema, `not migrated (0 of ${files.length} migrations)`, migrate);
  }
  if (pending.length > 0) {
    // The first and the last when there are many: the line stays whole on a terminal.
    const [first, ...rest] = pending.map((f) => f.file);
    const names = rest.length > 2 ? `${first}, …, ${rest.at(-1)}` : [first, ...rest].join(', ');
    const count = pending.length === 1 ? '1 migration' : `${pending.length} migrations`;
    return line.fail('schema', schema, `${count} pending (${names})`, migrate);
  }
  const current = [...applied.keys()].sort().at(-1) ?? '';
  const newer = laterVersions(files, applied).length;
  const note = newer > 0 ? `, ${newer} from a later release` : '';
  return line.pass('schema', schema, `migrated (at ${current}, ${applied.size} migrations${note})`);
}
