/** The migration runner and the `migrate` command against the real PostgreSQL server. */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, afterEach, describe, expect, inject, it, vi } from 'vitest';
import { run } from '../../../src/cli/migrate.js';
import { runCli } from '../../../src/cli/program.js';
import type { Logger } from '../../../src/ops/logger.js';
import {
  DatabaseUnreachableError,
  MigrationChecksumError,
  MigrationRefusedError,
} from '../../../src/store/errors.js';
import { loadMigrationFiles, migrate } from '../../../src/store/migrate.js';
import { createTestDatabase } from '../../support/database.js';

const execFileAsync = promisify(execFile);
const adminUrl = inject('adminDatabaseUrl');
const created: string[] = [];

/** A database name that does not exist yet, dropped after the file (and by the run's sweep). */
function newDatabaseUrl(): { url: string; name: string } {
  const runPid = inject('templateDatabase').split('_').pop();
  const name = `perks_test_mig${randomBytes(5).toString('hex')}_${runPid}`;
  created.push(name);
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return { url: url.toString(), name };
}

async function query<T extends pg.QueryResultRow>(url: string, sql: string): Promise<T[]> {
  const client = new pg.Client(url);
  await client.connect();
  try {
    return (await client.query<T>(sql)).rows;
  } finally {
    await client.end();
  }
}

/** Every function of the schema perks: signature, definition and comment. */
function functionsOf(url: string) {
  return query<{ signature: string; definition: string; comment: string | null }>(
    url,
    `select p.oid::regprocedure::text as signature, pg_get_functiondef(p.oid) as definition,
            obj_description(p.oid, 'pg_proc') as comment
     from pg_proc p join pg_namespace n on n.oid = p.pronamespace
     where n.nspname = 'perks' order by 1`,
  );
}

afterAll(async () => {
  for (const name of created) {
    await query(adminUrl, `drop database if exists ${name} with (force)`);
  }
});

describe('migrate', () => {
  it('creates a missing database, applies every migration, and is idempotent', async () => {
    const { url } = newDatabaseUrl();
    const files = await loadMigrationFiles();
    const first = await migrate({ databaseUrl: url, schema: 'perks' });
    expect(first).toEqual({
      databaseCreated: true,
      applied: files.map((f) => f.file),
      current: files.at(-1)?.version,
      count: files.length,
    });
    const second = await migrate({ databaseUrl: url, schema: 'perks' });
    expect(second).toEqual({
      databaseCreated: false,
      applied: [],
      current: first.current,
      count: files.length,
    });
    const tables = await query<{ table_name: string }>(
      url,
      `select table_name from information_schema.tables where table_schema = 'perks' order by 1`,
    );
    expect(tables.map((t) => t.table_name)).toEqual([
      'consumers',
      'rejected_rewards',
      'reward_event_cursors',
      'reward_event_failures',
      'reward_event_log',
      'reward_event_pending',
      'reward_events',
      'reward_status_changes',
      'rewards',
      'schema_migrations',
      'schema_repeatable_migrations',
      'signup_outbox',
    ]);
  });

  it('is safe when two processes migrate a brand-new database at once', async () => {
    const { url } = newDatabaseUrl();
    const child = fileURLToPath(new URL('./migrate-child.ts', import.meta.url));
    // Far enough ahead for both children to have loaded tsx and the store.
    const startAt = String(Date.now() + 2500);
    const runChild = () =>
      execFileAsync(process.execPath, ['--import', 'tsx', child, url, 'perks', startAt], {
        timeout: 60_000,
      });
    const outputs = await Promise.all([runChild(), runChild()]);
    const results = outputs.map((o) => JSON.parse(o.stdout) as Awaited<ReturnType<typeof migrate>>);
    const files = await loadMigrationFiles();
    // Each migration applied by exactly one of them, the database created by one.
    expect(results.flatMap((r) => r.applied).sort()).toEqual(files.map((f) => f.file));
    expect(results.filter((r) => r.databaseCreated).length).toBe(1);
    expect(results.map((r) => r.current)).toEqual([files.at(-1)?.version, files.at(-1)?.version]);
    const rows = await query<{ n: number }>(
      url,
      'select count(*)::int as n from perks.schema_migrations',
    );
    expect(rows[0]?.n).toBe(files.length);
  });

  it('migrates another schema, leaving the default one alone', async () => {
    const db = await createTestDatabase();
    try {
      await migrate({ databaseUrl: db.url, schema: 'perks_alt' });
      const rows = await query<{ table_schema: string; n: number }>(
        db.url,
        `select table_schema, count(*)::int as n from information_schema.tables
         where table_schema like 'perks%' group by 1 order by 1`,
      );
      expect(rows).toEqual([
        { table_schema: 'perks', n: 12 },
        { table_schema: 'perks_alt', n: 12 },
      ]);
    } finally {
      await db.drop();
    }
  });

  it('refuses a schema name that is not a plain identifier', async () => {
    await expect(
      migrate({ databaseUrl: adminUrl, schema: 'perks"; drop table x; --' }),
    ).rejects.toThrow(/invalid schema name/);
  });

  it('names the missing right in one line when PostgreSQL refuses a statement', async () => {
    const { url, name } = newDatabaseUrl();
    const role = `perks_test_norights_${randomBytes(4).toString('hex')}`;
    await query(adminUrl, `create database ${name}`);
    await query(adminUrl, `create role ${role} login`);
    try {
      const asRole = new URL(url);
      asRole.username = role;
      const refused = migrate({ databaseUrl: asRole.toString(), schema: 'perks' });
      await expect(refused).rejects.toBeInstanceOf(MigrationRefusedError);
      await expect(refused).rejects.toThrow(
        /^PostgreSQL refused to migrate schema perks: permission denied for database .* \(42501\): the user of DATABASE_DIRECT_URL \(else DATABASE_URL\) needs CREATE on the database/,
      );
    } finally {
      await query(adminUrl, `drop database if exists ${name} with (force)`);
      await query(adminUrl, `drop role ${role}`);
    }
  });

  it('refuses to run when an applied migration was edited', async () => {
    const db = await createTestDatabase();
    try {
      await query(db.url, `update perks.schema_migrations set checksum = 'edited'`);
      await expect(migrate({ databaseUrl: db.url, schema: 'perks' })).rejects.toBeInstanceOf(
        MigrationChecksumError,
      );
    } finally {
      await db.drop();
    }
  });

  it('accepts the checksum 000002 had before its comments were edited, and keeps it', async () => {
    const db = await createTestDatabase();
    try {
      const former = '70d527fecd9185ac3014a66babf4572b18bada1ccd53053d35fff6eb41522434';
      await query(
        db.url,
        `update perks.schema_migrations set checksum = '${former}' where version = '000002'`,
      );
      const result = await migrate({ databaseUrl: db.url, schema: 'perks' });
      expect(result.applied).toEqual([]);
      const current = (await loadMigrationFiles()).find((f) => f.version === '000002')?.checksum;
      expect(current).not.toBe(former);
      // Left as recorded: the earlier build, rolled back to, still finds its own checksum.
      const rows = await query<{ checksum: string }>(
        db.url,
        `select checksum from perks.schema_migrations where version = '000002'`,
      );
      expect(rows).toEqual([{ checksum: former }]);
    } finally {
      await db.drop();
    }
  });

  it('migrates a schema the released editions of 000001-000005 made, to the functions of a fresh one', async () => {
    const released = new URL('./released-migrations/', import.meta.url);
    const old = newDatabaseUrl();
    await migrate({ databaseUrl: old.url, schema: 'perks', migrations: released });
    // What the released build left: the function of 000005 and the overload of 000002/000003.
    const before = await functionsOf(old.url);
    expect(before.map((f) => f.signature)).toContain(
      'perks.write_reward_pages(jsonb,jsonb,uuid[])',
    );
    await query(old.url, 'drop table perks.schema_repeatable_migrations');

    const upgrade = await migrate({ databaseUrl: old.url, schema: 'perks' });
    expect(upgrade.applied).toEqual([
      '000006_drop_write_reward_pages_overload.sql',
      '000007_rejected_rewards.sql',
      '000008_created_events_on_rewards.sql',
      '000009_rewards_without_consumer_key.sql',
      '000010_claim_signups_without_key.sql',
      '000011_reward_event_pending_indexes.sql',
      '000012_reward_event_pending_oldest.sql',
    ]);
    const fresh = newDatabaseUrl();
    await migrate({ databaseUrl: fresh.url, schema: 'perks' });
    const upgraded = await functionsOf(old.url);
    expect(upgraded).toEqual(await functionsOf(fresh.url));
    expect(upgraded.map((f) => f.signature)).toEqual([
      'perks.advance_reward_event_cursor(text,bigint)',
      'perks.claim_reward_event_pending(integer)',
      'perks.claim_waiting_signups(integer,boolean)',
      'perks.clear_reward_event_pending(text)',
      'perks.datastore_summary()',
      'perks.delete_processed_signups(integer,integer)',
      'perks.enqueue_enrollment(text,text[],text[])',
      'perks.mark_not_enrolled(text,timestamp with time zone)',
      'perks.mark_signups_processed(bigint[],text[],text[])',
      'perks.notify_signup_outbox()',
      'perks.oldest_reward_event()',
      'perks.prune_reward_events(timestamp with time zone,boolean,bigint,integer)',
      'perks.record_consumer_error(text,text,text)',
      'perks.record_enrollment(text,text,timestamp with time zone,text,text[],text[])',
      'perks.record_rejected_rewards(text,jsonb,timestamp with time zone)',
      'perks.record_reward_event_failure(bigint,text,integer,text)',
      'perks.release_reward_event_pending(text[])',
      'perks.replay_reward_events(bigint)',
      'perks.reward_event_deliveries(boolean,integer)',
      'perks.reward_event_json(uuid,numeric,text,text,text,timestamp with time zone,text,timestamp with time zone,text,text)',
      'perks.reward_event_lag()',
      'perks.undelivered_reward_events(text,integer)',
      'perks.write_reward_pages(jsonb,jsonb,uuid[],text[])',
    ]);
    // Unchanged, the repeatable file is not applied again: the function keeps its oid.
    const oid = "select oid::text from pg_proc where proname = 'write_reward_pages'";
    const [first] = await query<{ oid: string }>(old.url, oid);
    await migrate({ databaseUrl: old.url, schema: 'perks' });
    expect(await query<{ oid: string }>(old.url, oid)).toEqual([first]);
  });

  it('an older build (it does not know the last migration) leaves the functions as they are', async () => {
    const db = await createTestDatabase();
    const older = await mkdtemp(join(tmpdir(), 'perks-older-build-'));
    try {
      // This build without its last migration, and a write_reward_pages of its own.
      const ours = fileURLToPath(new URL('../../../src/store/migrations/', import.meta.url));
      await cp(ours, older, { recursive: true });
      const files = await loadMigrationFiles();
      await rm(join(older, files.at(-1)?.file ?? 'none'));
      const writer = join(older, 'repeatable', 'write_reward_pages.sql');
      const edition = (await readFile(writer, 'utf8')).replace('Writes pages', 'Once wrote pages');
      await writeFile(writer, edition);
      const before = await functionsOf(db.url);
      const warn = vi.fn();
      const logger = { info: vi.fn(), warn } as unknown as Logger;
      const result = await migrate({
        databaseUrl: db.url,
        schema: 'perks',
        migrations: pathToFileURL(`${older}/`),
        logger,
      });
      expect(result.applied).toEqual([]);
      expect(await functionsOf(db.url)).toEqual(before);
      expect(warn).toHaveBeenCalledWith(
        { schema: 'perks', versions: [files.at(-1)?.version] },
        expect.stringMatching(/its SQL functions are kept$/),
      );
    } finally {
      await rm(older, { recursive: true, force: true });
      await db.drop();
    }
  });

  it('still refuses any other checksum of 000002', async () => {
    const db = await createTestDatabase();
    try {
      await query(
        db.url,
        `update perks.schema_migrations set checksum = '${'0'.repeat(64)}' where version = '000002'`,
      );
      await expect(migrate({ databaseUrl: db.url, schema: 'perks' })).rejects.toBeInstanceOf(
        MigrationChecksumError,
      );
    } finally {
      await db.drop();
    }
  });

  it('reports an unreachable server with its host and port, not its URL', async () => {
    const error = await migrate({
      databaseUrl: 'postgres://postgres:s3cret@127.0.0.1:1/perks',
      schema: 'perks',
    }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DatabaseUnreachableError);
    expect((error as Error).message).toMatch(/127\.0\.0\.1:1 .*ECONNREFUSED/);
    expect((error as Error).message).not.toContain('s3cret');
  });
});

describe('perks-worker migrate', () => {
  afterEach(() => {
    vi.unstubAllEnvs();
    vi.restoreAllMocks();
  });

  function capture() {
    const out: string[] = [];
    const err: string[] = [];
    vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => {
      out.push(String(chunk));
      return true;
    });
    vi.spyOn(process.stderr, 'write').mockImplementation((chunk) => {
      err.push(String(chunk));
      return true;
    });
    return { out, err };
  }

  it('prints what it did, then that there is nothing to do', async () => {
    const { url, name } = newDatabaseUrl();
    vi.stubEnv('DATABASE_URL', url);
    vi.stubEnv('DATABASE_SCHEMA', 'perks');
    vi.stubEnv('LOG_LEVEL', 'silent');
    const first = capture();
    expect(await run()).toBe(0);
    expect(first.out.join('')).toBe(
      `created database ${name}\napplied 000001_init.sql\napplied 000002_write_reward_pages.sql\napplied 000003_not_enrolled_race.sql\napplied 000004_signup_outbox.sql\napplied 000005_reward_events.sql\napplied 000006_drop_write_reward_pages_overload.sql\napplied 000007_rejected_rewards.sql\napplied 000008_created_events_on_rewards.sql\napplied 000009_rewards_without_consumer_key.sql\napplied 000010_claim_signups_without_key.sql\napplied 000011_reward_event_pending_indexes.sql\napplied 000012_reward_event_pending_oldest.sql\nschema perks is at 000012 (12 migrations)\n`,
    );
    vi.restoreAllMocks();
    const second = capture();
    expect(await run()).toBe(0);
    expect(second.out.join('')).toBe('schema perks is at 000012 (12 migrations)\n');
  });

  it('says in one line that the server cannot be reached, and exits 1', async () => {
    vi.stubEnv('DATABASE_URL', 'postgres://postgres@127.0.0.1:1/perks');
    vi.stubEnv('LOG_LEVEL', 'silent');
    const { out, err } = capture();
    expect(await run()).toBe(1);
    expect(out).toEqual([]);
    expect(err).toHaveLength(1);
    expect(err[0]).toMatch(
      /^perks-worker: migrate: cannot reach PostgreSQL at 127\.0\.0\.1:1 \(database perks\): .*ECONNREFUSED.*\n$/,
    );
  });

  it('shows its help', async () => {
    const { out } = capture();
    expect(await runCli(['migrate', '--help'], '0.0.0')).toBe(0);
    expect(out.join('')).toMatch(/^Usage: perks-worker migrate \[options\]/);
  });

  it('rejects an unknown option', async () => {
    await expect(runCli(['migrate', '--force'], '0.0.0')).rejects.toThrow(
      /migrate: Unknown option '--force'/,
    );
  });
});
