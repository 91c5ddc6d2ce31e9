/**
 * Creates the database when it does not exist yet, applies the numbered SQL migrations of
 * ./migrations/ in order, each in its own transaction, recorded in <schema>.schema_migrations,
 * then the repeatable ones of ./migrations/repeatable/ (functions, one file each, written with
 * `create or replace`), each applied again whenever its checksum differs from the one recorded
 * in <schema>.schema_repeatable_migrations, as Flyway's repeatable migrations are. During a
 * rolling deploy the last build to migrate wins: change a function's signature under a new
 * name, never in place.
 *
 * Released numbered files are never edited, with one exception: 000002, 000003 and 000005 each
 * held a whole copy of write_reward_pages, moved to its repeatable file so that its body is
 * written once. A schema that ran their earlier editions has the same tables, and its function
 * is replaced from the repeatable file, so their earlier checksums are accepted
 * (supersededChecksums; migrate.test.ts migrates a database with the released editions, then
 * with these, and compares its functions with a fresh one's). A build before this one refuses
 * a schema created by this one (it finds the new checksums).
 *
 * Schema name: the files use unqualified names and each runs after
 * `set local search_path to "<schema>"`, so one file serves any DATABASE_SCHEMA and the
 * checksum does not depend on it. The name is validated and quoted (identifier.ts).
 *
 * Replicas starting together are safe: every transaction first takes a transaction-scoped
 * advisory lock keyed by the schema, then reads what is applied, so the second replica waits
 * and finds nothing left to do. Transaction-scoped, not a session lock: through PgBouncer's
 * transaction pooling each transaction may run on another server connection, where a session
 * lock would be taken on one and released on another. Creating a missing database needs a
 * direct connection (see migrate()); two processes racing to CREATE DATABASE both succeed
 * (42P04 / 23505).
 */
import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import pg from 'pg';
import type { Logger } from '../ops/logger.js';
import {
  DatabaseUnreachableError,
  errorCode,
  MigrationChecksumError,
  MigrationFileError,
} from './errors.js';
import { assertSchemaName, quoteIdentifier } from './identifier.js';

export interface MigrateOptions {
  /**
   * postgres:// URL of the datastore (DATABASE_DIRECT_URL, else DATABASE_URL); its database is
   * created when missing, if the URL is a direct one.
   */
  databaseUrl: string;
  /** Schema holding the tables (created when missing). */
  schema: string;
  logger?: Logger;
  /** Directory of the migration files: this build's, unless a test passes released editions. */
  migrations?: URL;
}

export interface MigrateResult {
  databaseCreated: boolean;
  /** Numbered files applied by this call, in order; empty when the schema was up to date. */
  applied: string[];
  /** Version of the latest applied migration, e.g. "000001". */
  current: string;
  /** Migrations the schema now has (this call's and earlier ones). */
  count: number;
}

export interface MigrationFile {
  version: string;
  name: string;
  file: string;
  sql: string;
  checksum: string;
}

const migrationsDirectory = new URL('./migrations/', import.meta.url);
const filePattern = /^(\d{6})_([a-z0-9_]+)\.sql$/;
const repeatablePattern = /^([a-z0-9_]+)\.sql$/;
/** First key of the advisory lock: "perks-worker migrations" (the second is the schema). */
const lockNamespace = 'perks-worker migrations';

/**
 * Checksums of earlier editions of released files, accepted when recorded (see the top of this
 * file). 000002's first one is its edition before an edit of its comments alone.
 */
const supersededChecksums: Readonly<Record<string, readonly string[]>> = {
  '000002': [
    '70d527fecd9185ac3014a66babf4572b18bada1ccd53053d35fff6eb41522434',
    '96f657391427819a950f6d117bf35284c134abe009412cf0bbfa55019f7944a2',
  ],
  '000003': ['ac641aed1ba019442d59434553c6183452d69d37cb785e650db9a0382dc4d00c'],
  '000005': ['635c127b11b39495fa52b755103c5b107ec856e4f06157cbbfca5fa90459339b'],
};

const pgErrors = {
  invalidCatalogName: '3D000',
  duplicateDatabase: '42P04',
  uniqueViolation: '23505',
} as const;

export async function migrate(options: MigrateOptions): Promise<MigrateResult> {
  const schema = assertSchemaName(options.schema);
  const directory = options.migrations ?? migrationsDirectory;
  const files = await loadMigrationFiles(directory);
  const repeatables = await loadRepeatableFiles(directory);
  const target = describeUrl(options.databaseUrl);

  let databaseCreated = false;
  let client: pg.Client;
  try {
    client = await connect(options.databaseUrl);
  } catch (error) {
    // Through PgBouncer a missing database is refused with 08P01, like any refusal of its own,
    // and stays unreachable there for server_login_retry after it is created: it is created
    // on a direct connection only (DATABASE_DIRECT_URL), and reported unreachable here.
    if (errorCode(error) !== pgErrors.invalidCatalogName) throw unreachable(target, error);
    databaseCreated = await createDatabase(options.databaseUrl, target.database);
    if (databaseCreated) options.logger?.info({ database: target.database }, 'created database');
    client = await connect(options.databaseUrl).catch((e: unknown) => {
      throw unreachable(target, e);
    });
  }

  try {
    const recorded = await prepareSchema(client, schema);
    const applied = await applyPending(client, schema, files, recorded.migrations, options.logger);
    await applyRepeatables(client, schema, repeatables, recorded.repeatables, options.logger);
    const current = await currentVersion(client, schema);
    const count = files.filter((f) => f.version <= current).length;
    return { databaseCreated, applied, current, count };
  } finally {
    await client.end();
  }
}

/** The numbered migration files shipped with this build, sorted by version. */
export async function loadMigrationFiles(
  directory = migrationsDirectory,
): Promise<MigrationFile[]> {
  const files: MigrationFile[] = [];
  for (const { file, sql, checksum } of await readSqlFiles(directory)) {
    const match = filePattern.exec(file);
    if (!match?.[1] || !match[2]) {
      throw new MigrationFileError(`migration file ${file} must be named like 000001_init.sql`);
    }
    if (files.some((f) => f.version === match[1])) {
      throw new MigrationFileError(`two migration files have version ${match[1]}`);
    }
    files.push({ version: match[1], name: match[2], file, sql, checksum });
  }
  return files;
}

type SqlFile = Omit<MigrationFile, 'version' | 'name'>;

async function loadRepeatableFiles(directory: URL): Promise<SqlFile[]> {
  const files = await readSqlFiles(new URL('repeatable/', directory)).catch((error: unknown) => {
    if (errorCode(error) === 'ENOENT') return [];
    throw error;
  });
  for (const { file } of files) {
    if (!repeatablePattern.test(file)) {
      throw new MigrationFileError(
        `repeatable migration ${file} must be named like a_function.sql`,
      );
    }
  }
  return files;
}

async function readSqlFiles(directory: URL): Promise<SqlFile[]> {
  const names = (await readdir(directory)).filter((n) => n.endsWith('.sql')).sort();
  return Promise.all(
    names.map(async (file) => {
      const sql = await readFile(new URL(file, directory), 'utf8');
      return { file, sql, checksum: createHash('sha256').update(sql).digest('hex') };
    }),
  );
}

interface Recorded {
  /** version -> checksum */
  migrations: Map<string, string>;
  /** repeatable file -> checksum */
  repeatables: Map<string, string>;
}

/** Creates the schema and its two tables of applied migrations, and reads them. */
async function prepareSchema(client: pg.Client, schema: string): Promise<Recorded> {
  const q = quoteIdentifier(schema);
  return inTransaction(client, async () => {
    await lockMigrations(client, schema);
    await client.query(`create schema if not exists ${q}`);
    await client.query(`create table if not exists ${q}.schema_migrations (
      version text primary key,
      name text not null,
      applied_at timestamptz not null default now(),
      checksum text not null
    )`);
    await client.query(`create table if not exists ${q}.schema_repeatable_migrations (
      file text primary key,
      applied_at timestamptz not null default now(),
      checksum text not null
    )`);
    // Comments are part of the documented contract, like those of the migration files.
    await client.query(`
      comment on table ${q}.schema_migrations is 'Migrations applied to this schema by perks-worker migrate.';
      comment on column ${q}.schema_migrations.version is 'Six-digit version, the prefix of the file name (000001).';
      comment on column ${q}.schema_migrations.name is 'Name part of the file (init for 000001_init.sql).';
      comment on column ${q}.schema_migrations.applied_at is 'When the migration was applied.';
      comment on column ${q}.schema_migrations.checksum is 'sha256 of the file; the statements of an applied file must never change.';
      comment on table ${q}.schema_repeatable_migrations is 'Repeatable migrations (functions, migrations/repeatable/) as last applied; each is applied again when its file changes.';
      comment on column ${q}.schema_repeatable_migrations.file is 'File name (write_reward_pages.sql).';
      comment on column ${q}.schema_repeatable_migrations.applied_at is 'When this checksum was applied.';
      comment on column ${q}.schema_repeatable_migrations.checksum is 'sha256 of the file as last applied.';
    `);
    const migrations = await client.query<{ version: string; checksum: string }>(
      `select version, checksum from ${q}.schema_migrations`,
    );
    const repeatables = await client.query<{ file: string; checksum: string }>(
      `select file, checksum from ${q}.schema_repeatable_migrations`,
    );
    return {
      migrations: new Map(migrations.rows.map((r) => [r.version, r.checksum])),
      repeatables: new Map(repeatables.rows.map((r) => [r.file, r.checksum])),
    };
  });
}

async function applyPending(
  client: pg.Client,
  schema: string,
  files: readonly MigrationFile[],
  appliedChecksums: ReadonlyMap<string, string>,
  logger: Logger | undefined,
): Promise<string[]> {
  const q = quoteIdentifier(schema);
  for (const file of files) {
    const appliedChecksum = appliedChecksums.get(file.version);
    if (appliedChecksum !== undefined) assertUnchanged(file, appliedChecksum);
  }
  const known = new Set(files.map((f) => f.version));
  const unknown = [...appliedChecksums.keys()].filter((version) => !known.has(version));
  if (unknown.length > 0) {
    // A newer release migrated this schema (rolling deploy or rollback). Migrations only add,
    // so this older code keeps working: warn rather than crash-loop the replica.
    logger?.warn({ schema, versions: unknown }, 'schema has migrations this build does not know');
  }

  const applied: string[] = [];
  for (const file of files) {
    if (appliedChecksums.has(file.version)) continue;
    const appliedHere = await inTransaction(client, async () => {
      await lockMigrations(client, schema);
      // Another replica may have applied it while this one waited for the lock.
      const { rows } = await client.query<{ checksum: string }>(
        `select checksum from ${q}.schema_migrations where version = $1`,
        [file.version],
      );
      if (rows[0]) {
        assertUnchanged(file, rows[0].checksum);
        return false;
      }
      await client.query(`set local search_path to ${q}`);
      await client.query(file.sql);
      await client.query(
        `insert into ${q}.schema_migrations (version, name, checksum) values ($1, $2, $3)`,
        [file.version, file.name, file.checksum],
      );
      return true;
    });
    if (!appliedHere) continue;
    logger?.info({ schema, migration: file.file }, 'applied migration');
    applied.push(file.file);
  }
  return applied;
}

async function applyRepeatables(
  client: pg.Client,
  schema: string,
  files: readonly SqlFile[],
  appliedChecksums: ReadonlyMap<string, string>,
  logger: Logger | undefined,
): Promise<void> {
  const q = quoteIdentifier(schema);
  for (const file of files) {
    if (appliedChecksums.get(file.file) === file.checksum) continue;
    const appliedHere = await inTransaction(client, async () => {
      await lockMigrations(client, schema);
      const { rows } = await client.query<{ checksum: string }>(
        `select checksum from ${q}.schema_repeatable_migrations where file = $1`,
        [file.file],
      );
      if (rows[0]?.checksum === file.checksum) return false;
      await client.query(`set local search_path to ${q}`);
      await client.query(file.sql);
      await client.query(
        `insert into ${q}.schema_repeatable_migrations (file, checksum) values ($1, $2)
         on conflict (file) do update set checksum = excluded.checksum, applied_at = now()`,
        [file.file, file.checksum],
      );
      return true;
    });
    if (appliedHere) {
      logger?.info({ schema, migration: `repeatable/${file.file}` }, 'applied migration');
    }
  }
}

/** Held until the caller's transaction ends (see the top of this file). */
async function lockMigrations(client: pg.Client, schema: string): Promise<void> {
  await client.query('select pg_advisory_xact_lock(hashtext($1), hashtext($2))', [
    lockNamespace,
    schema,
  ]);
}

export function assertUnchanged(file: MigrationFile, appliedChecksum: string): void {
  if (appliedChecksum === file.checksum) return;
  if (supersededChecksums[file.version]?.includes(appliedChecksum)) return;
  throw new MigrationChecksumError(file.file, appliedChecksum, file.checksum);
}

async function currentVersion(client: pg.Client, schema: string): Promise<string> {
  const { rows } = await client.query<{ version: string | null }>(
    `select max(version) as version from ${quoteIdentifier(schema)}.schema_migrations`,
  );
  return rows[0]?.version ?? '';
}

async function inTransaction<T>(client: pg.Client, work: () => Promise<T>): Promise<T> {
  await client.query('begin');
  try {
    const result = await work();
    await client.query('commit');
    return result;
  } catch (error) {
    await client.query('rollback').catch(() => undefined);
    throw error;
  }
}

/**
 * CREATE DATABASE from the server's `postgres` maintenance database. Returns false when
 * another process created it first: 42P04, or 23505 when both inserted into pg_database at
 * the same instant.
 */
async function createDatabase(databaseUrl: string, database: string): Promise<boolean> {
  const maintenance = new URL(databaseUrl);
  maintenance.pathname = '/postgres';
  const client = await connect(maintenance.toString()).catch((error: unknown) => {
    throw unreachable(describeUrl(maintenance.toString()), error);
  });
  try {
    await client.query(`create database ${quoteIdentifier(database)}`);
    return true;
  } catch (error) {
    const code = errorCode(error);
    if (code === pgErrors.duplicateDatabase || code === pgErrors.uniqueViolation) return false;
    throw error;
  } finally {
    await client.end();
  }
}

async function connect(connectionString: string): Promise<pg.Client> {
  const client = new pg.Client({
    connectionString,
    connectionTimeoutMillis: 10_000,
    application_name: 'perks-worker migrate',
  });
  // A connection dropped while idle must not crash the process with an unhandled 'error'.
  client.on('error', () => undefined);
  await client.connect();
  return client;
}

interface UrlParts {
  host: string;
  port: number;
  database: string;
}

function describeUrl(databaseUrl: string): UrlParts {
  const url = new URL(databaseUrl);
  return {
    host: url.hostname || 'localhost',
    port: url.port ? Number(url.port) : 5432,
    database: decodeURIComponent(url.pathname.replace(/^\//, '')) || 'postgres',
  };
}

function unreachable(target: UrlParts, cause: unknown): DatabaseUnreachableError {
  return new DatabaseUnreachableError(target.host, target.port, target.database, cause);
}
