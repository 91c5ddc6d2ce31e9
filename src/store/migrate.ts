/**
 * Creates the database when missing, applies ./migrations/ in order, each in its own transaction
 * (recorded in schema_migrations), then those of ./migrations/repeatable/ in name order
 * (`create or replace`), each again when its checksum changed, as Flyway's repeatable
 * migrations. Change a function's signature under a new name: in a rolling deploy the last
 * build to migrate wins, but a build older than the schema (it finds numbered migrations it does
 * not know) leaves the functions as the newer one wrote them: its own may need the schema it
 * knew (write_reward_pages before 000008 inserts into what is now a view). Each file runs with
 * `search_path` set to the schema. Every transaction takes an advisory lock keyed by the schema
 * (transaction-scoped: PgBouncer pools transactions) before reading what is applied, so replicas
 * starting together are safe.
 *
 * 000002, 000003 and 000005 once held copies of write_reward_pages, now in its repeatable file;
 * their earlier checksums are accepted (supersededChecksums, checked by migrate.test.ts).
 */
import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import pg from 'pg';
import { errorCode } from '../errors.js';
import type { Logger } from '../ops/logger.js';
import { connectCreating } from './database.js';
import { MigrationChecksumError, MigrationFileError, MigrationRefusedError } from './errors.js';
import { assertSchemaName, quoteIdentifier } from './identifier.js';

export interface MigrateOptions {
  /** DATABASE_DIRECT_URL, else DATABASE_URL. */
  databaseUrl: string;
  schema: string;
  logger?: Logger;
  /** This build's migrations unless a test passes released editions. */
  migrations?: URL;
}

export interface MigrateResult {
  databaseCreated: boolean;
  /** Numbered files applied by this call, in order. */
  applied: string[];
  /** Version of the latest applied migration, e.g. "000001". */
  current: string;
  /** Migrations the schema now has. */
  count: number;
}

interface SqlFile {
  file: string;
  sql: string;
  checksum: string;
}

export interface MigrationFile extends SqlFile {
  version: string;
  name: string;
}

const migrationsDirectory = new URL('./migrations/', import.meta.url);
const bootstrapFile = new URL('bootstrap/migration_tables.sql', migrationsDirectory);
const filePattern = /^(\d{6})_([a-z0-9_]+)\.sql$/;
const repeatablePattern = /^[a-z0-9_]+\.sql$/;
const lockNamespace = 'perks-worker migrations';

/** Checksums of earlier editions of released files (see the top). */
const supersededChecksums: Readonly<Record<string, readonly string[]>> = {
  '000002': [
    '70d527fecd9185ac3014a66babf4572b18bada1ccd53053d35fff6eb41522434',
    '96f657391427819a950f6d117bf35284c134abe009412cf0bbfa55019f7944a2',
  ],
  '000003': ['ac641aed1ba019442d59434553c6183452d69d37cb785e650db9a0382dc4d00c'],
  '000005': ['635c127b11b39495fa52b755103c5b107ec856e4f06157cbbfca5fa90459339b'],
};

export async function migrate(options: MigrateOptions): Promise<MigrateResult> {
  const schema = assertSchemaName(options.schema);
  const directory = options.migrations ?? migrationsDirectory;
  const files = await loadMigrationFiles(directory);
  const repeatables = await loadRepeatableFiles(directory);
  try {
    return await migrateSchema(options, schema, files, repeatables);
  } catch (error) {
    // A statement refused (a right missing): one line naming the fix, not a driver's stack.
    if (!(error instanceof pg.DatabaseError) || !error.code) throw error;
    throw new MigrationRefusedError(schema, error.code, error);
  }
}

async function migrateSchema(
  options: MigrateOptions,
  schema: string,
  files: MigrationFile[],
  repeatables: SqlFile[],
): Promise<MigrateResult> {
  const { client, databaseCreated } = await connectCreating(options.databaseUrl, (database) =>
    options.logger?.info({ database }, 'created database'),
  );
  try {
    const run: Run = { client, schema, q: quoteIdentifier(schema), logger: options.logger };
    const recorded = await prepareSchema(run);
    const applied = await applyNumbered(run, files, recorded.numbered);
    const latest = files.at(-1)?.version ?? '';
    await applyRepeatables(run, repeatables, recorded.repeatable, latest);
    const { rows } = await client.query<{ version: string | null }>(
      `select max(version) as version from ${run.q}.schema_migrations`,
    );
    const current = rows[0]?.version ?? '';
    const count = files.filter((f) => f.version <= current).length;
    return { databaseCreated, applied, current, count };
  } finally {
    await client.end();
  }
}

export async function loadMigrationFiles(
  directory = migrationsDirectory,
): Promise<MigrationFile[]> {
  const files: MigrationFile[] = [];
  for (const sqlFile of await readSqlFiles(directory)) {
    const [, version, name] = filePattern.exec(sqlFile.file) ?? [];
    if (!version || !name) {
      throw new MigrationFileError(
        `migration file ${sqlFile.file} must be named like 000001_init.sql`,
      );
    }
    if (files.some((f) => f.version === version)) {
      throw new MigrationFileError(`two migration files have version ${version}`);
    }
    files.push({ ...sqlFile, version, name });
  }
  return files;
}

export async function loadRepeatableFiles(directory = migrationsDirectory): Promise<SqlFile[]> {
  const files = await readSqlFiles(new URL('repeatable/', directory)).catch((error: unknown) => {
    if (errorCode(error) === 'ENOENT') return [];
    throw error;
  });
  const misnamed = files.find(({ file }) => !repeatablePattern.test(file));
  if (misnamed) {
    throw new MigrationFileError(
      `repeatable migration ${misnamed.file} must be named like a_b.sql`,
    );
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

/** Creates the schema and its tables of applied migrations; returns what they record. */
async function prepareSchema(run: Run) {
  const { client, q } = run;
  const bootstrap = await readFile(bootstrapFile, 'utf8');
  return inTransaction(run, async () => {
    await client.query(`create schema if not exists ${q}`);
    await client.query(`set local search_path to ${q}`);
    await client.query(bootstrap);
    const numbered = await client.query<{ version: string; checksum: string }>(
      `select version, checksum from ${q}.schema_migrations`,
    );
    const repeatable = await client.query<{ file: string; checksum: string }>(
      `select file, checksum from ${q}.schema_repeatable_migrations`,
    );
    return {
      numbered: new Map(numbered.rows.map((r) => [r.version, r.checksum])),
      repeatable: new Map(repeatable.rows.map((r) => [r.file, r.checksum])),
    };
  });
}

// Applied versions this build does not know: a later release migrated the schema. Migrations
// only add, so it still serves this build, and its SQL functions are that release's to keep.
export function laterVersions(
  files: readonly MigrationFile[],
  applied: ReadonlyMap<string, string>,
) {
  const known = new Set(files.map((f) => f.version));
  return [...applied.keys()].filter((version) => !known.has(version));
}

/** One migrate call's connection; `q` is the quoted schema. */
interface Run {
  client: pg.Client;
  schema: string;
  q: string;
  logger: Logger | undefined;
}

async function applyNumbered(
  run: Run,
  files: readonly MigrationFile[],
  recorded: ReadonlyMap<string, string>,
): Promise<string[]> {
  const { client, q } = run;
  for (const file of files) {
    const checksum = recorded.get(file.version);
    if (checksum !== undefined) assertUnchanged(file, checksum);
  }
  const unknown = laterVersions(files, recorded);
  if (unknown.length > 0) {
    const message = 'schema has migrations this build does not know; its SQL functions are kept';
    run.logger?.warn({ schema: run.schema, versions: unknown }, message);
  }
  const applied: string[] = [];
  for (const file of files) {
    if (recorded.has(file.version)) continue;
    const appliedHere = await applyLocked(run, file.file, file.sql, async () => {
      const { rows } = await client.query<{ checksum: string }>(
        `select checksum from ${q}.schema_migrations where version = $1`,
        [file.version],
      );
      if (rows[0]) {
        assertUnchanged(file, rows[0].checksum);
        return false;
      }
      await client.query(
        `insert into ${q}.schema_migrations (version, name, checksum) values ($1, $2, $3)`,
        [file.version, file.name, file.checksum],
      );
      return true;
    });
    if (appliedHere) applied.push(file.file);
  }
  return applied;
}

/** `latest`: this build's last numbered migration; a schema past it keeps its functions. */
async function applyRepeatables(
  run: Run,
  files: readonly SqlFile[],
  recorded: ReadonlyMap<string, string>,
  latest: string,
): Promise<void> {
  for (const file of files) {
    if (recorded.get(file.file) === file.checksum) continue;
    await applyLocked(run, `repeatable/${file.file}`, file.sql, async () => {
      // Under the lock: a newer build may have migrated since this one read the schema.
      const newer = await run.client.query(
        `select from ${run.q}.schema_migrations where version > $1 limit 1`,
        [latest],
      );
      if (newer.rows.length > 0) return false;
      const { rows } = await run.client.query(
        `insert into ${run.q}.schema_repeatable_migrations (file, checksum) values ($1, $2)
         on conflict (file) do update set checksum = excluded.checksum, applied_at = now()
         where schema_repeatable_migrations.checksum <> excluded.checksum
         returning file`,
        [file.file, file.checksum],
      );
      return rows.length === 1;
    });
  }
}

/** `record` returns false when another replica applied the file while this one waited. */
async function applyLocked(
  run: Run,
  migration: string,
  sql: string,
  record: () => Promise<boolean>,
): Promise<boolean> {
  const applied = await inTransaction(run, async () => {
    if (!(await record())) return false;
    await run.client.query(`set local search_path to ${run.q}`);
    await run.client.query(sql);
    return true;
  });
  if (applied) run.logger?.info({ schema: run.schema, migration }, 'applied migration');
  return applied;
}

export function assertUnchanged(file: MigrationFile, appliedChecksum: string): void {
  if (appliedChecksum === file.checksum) return;
  if (supersededChecksums[file.version]?.includes(appliedChecksum)) return;
  throw new MigrationChecksumError(file.file, appliedChecksum, file.checksum);
}

async function inTransaction<T>({ client, schema }: Run, work: () => Promise<T>): Promise<T> {
  await client.query('begin');
  try {
    await client.query('select pg_advisory_xact_lock(hashtext($1), hashtext($2))', [
      lockNamespace,
      schema,
    ]);
    const result = await work();
    await client.query('commit');
    return result;
  } catch (error) {
    await client.query('rollback').catch(() => undefined);
    throw error;
  }
}
