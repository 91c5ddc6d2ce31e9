import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { expect, inject, vi } from 'vitest';

const prefix = 'perks_test_';

function withDatabase(url: string, database: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${database}`;
  return parsed.toString();
}

async function withAdmin<T>(adminUrl: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: adminUrl, connectionTimeoutMillis: 5000 });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/**
 * Builds the template every test file clones: an empty database with the migrations applied,
 * so a file's database costs one CREATE DATABASE ... TEMPLATE instead of a migration run.
 */
export async function prepareTemplateDatabase(adminUrl: string): Promise<string> {
  const template = `${prefix}template_${process.pid}`;
  await withAdmin(adminUrl, async (client) => {
    await client.query(`drop database if exists ${template}`);
    await client.query(`create database ${template}`);
  });
  const { migrateTemplate } = await import('./template.js');
  await migrateTemplate(withDatabase(adminUrl, template));
  return template;
}

/**
 * Drops the test databases of runs whose process is gone (crashed or killed runs), and with
 * `own`, those of this run too. Every name ends in the pid of the run that made it.
 */
export async function dropTestDatabases(adminUrl: string, { own = false } = {}): Promise<void> {
  await withAdmin(adminUrl, async (client) => {
    const { rows } = await client.query<{ datname: string }>(
      `select datname from pg_database where datname like $1`,
      [`${prefix}%`],
    );
    for (const { datname } of rows) {
      const pid = Number(datname.split('_').pop());
      const mine = pid === process.pid;
      if ((mine && own) || (!mine && !pidAlive(pid))) {
        await client.query(`drop database if exists ${datname} with (force)`);
      }
    }
  });
}

function pidAlive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

export interface TestDatabase {
  url: string;
  name: string;
  drop: () => Promise<void>;
}

/** A fresh, migrated database for one test file, cloned from the run's template. */
export async function createTestDatabase(): Promise<TestDatabase> {
  const adminUrl = inject('adminDatabaseUrl');
  const template = inject('templateDatabase');
  // Ends in the run's pid, like the template, so a crashed run's leftovers can be told apart.
  const name = `${prefix}${randomBytes(6).toString('hex')}_${template.split('_').pop()}`;
  await withAdmin(adminUrl, (client) =>
    client.query(`create database ${name} template ${template}`),
  );
  return {
    url: withDatabase(adminUrl, name),
    name,
    drop: () =>
      withAdmin(adminUrl, async (client) => {
        await client.query(`drop database if exists ${name} with (force)`);
      }),
  };
}

/** Resolves once exactly one session of the pool's database waits on a lock. */
export async function oneSessionWaitingOnALock(pool: pg.Pool): Promise<void> {
  await vi.waitFor(
    async () => {
      const { rows } = await pool.query<{ n: number }>(
        `select count(*)::int as n from pg_stat_activity
         where datname = current_database() and wait_event_type = 'Lock'`,
      );
      expect(rows[0]?.n).toBe(1);
    },
    { timeout: 5000, interval: 20 },
  );
}
