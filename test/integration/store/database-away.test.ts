/**
 * isDatabaseAway against what node-postgres really throws: the database away (refused, cut,
 * silent, a backend terminated), and refusals of ours, which must never pause the jobs.
 */
import { createServer } from 'node:net';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isDatabaseAway } from '../../../src/store/errors.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';
import { startTcpProxy, type TcpProxy, targetOf } from '../../support/tcp-proxy.js';

let db: TestDatabase;
let proxy: TcpProxy;
beforeAll(async () => {
  db = await createTestDatabase();
  proxy = await startTcpProxy(targetOf(db.url));
});
afterAll(async () => {
  await proxy.close();
  await db.drop();
});

/** The error of one query on a fresh pool of `url`. */
async function failure(url: string, sql = 'select 1', timeoutMs = 1000): Promise<unknown> {
  const pool = new pg.Pool({ connectionString: url, connectionTimeoutMillis: timeoutMs });
  pool.on('error', () => undefined);
  try {
    await pool.query(sql);
    return undefined;
  } catch (error) {
    return error;
  } finally {
    await pool.end();
  }
}

/** A port nothing listens on. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

describe('isDatabaseAway', () => {
  it('is true for a connection refused, cut, timed out, and a backend terminated', async () => {
    const url = new URL(db.url);
    url.host = `127.0.0.1:${await closedPort()}`;
    const refused = await failure(url.toString());
    expect(refused, String(refused)).toSatisfy(isDatabaseAway);

    proxy.pause();
    const cut = await failure(proxy.urlFor(db.url));
    proxy.blackhole();
    const silent = await failure(proxy.urlFor(db.url), 'select 1', 300);
    proxy.resume();
    expect(cut, String(cut)).toSatisfy(isDatabaseAway);
    expect(silent, String(silent)).toSatisfy(isDatabaseAway);

    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    client.on('error', () => undefined);
    const { rows } = await client.query<{ pid: number }>('select pg_backend_pid() as pid');
    const admin = new pg.Client({ connectionString: db.url });
    await admin.connect();
    const terminated = client.query('select pg_sleep(5)').catch((error: unknown) => error);
    await new Promise((resolve) => setTimeout(resolve, 200));
    await admin.query('select pg_terminate_backend($1)', [rows[0]?.pid]);
    await admin.end();
    const error = await terminated;
    expect((error as { code?: string }).code).toBe('57P01');
    expect(error).toSatisfy(isDatabaseAway);
    await client.end().catch(() => undefined);
  });

  it('is false for what PostgreSQL refused: a statement, a value, a database that is not there', async () => {
    expect(await failure(db.url, 'select from')).not.toSatisfy(isDatabaseAway); // 42601
    expect(await failure(db.url, "select 'x'::int")).not.toSatisfy(isDatabaseAway); // 22P02
    const missing = new URL(db.url);
    missing.pathname = '/perks_test_no_such_database';
    const noDatabase = await failure(missing.toString());
    expect((noDatabase as { code?: string }).code).toBe('3D000');
    expect(noDatabase).not.toSatisfy(isDatabaseAway);
    expect(new Error('anything')).not.toSatisfy(isDatabaseAway);
  });
});
