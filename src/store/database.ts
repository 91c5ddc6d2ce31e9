/**
 * The migration runner's connection. A missing database is created on a direct connection only
 * (DATABASE_DIRECT_URL): PgBouncer refuses it with 08P01 and keeps refusing it for a while.
 */
import pg from 'pg';
import { errorCode } from '../errors.js';
import { DatabaseUnreachableError } from './errors.js';
import { quoteIdentifier } from './identifier.js';

const pgErrors = {
  invalidCatalogName: '3D000',
  duplicateDatabase: '42P04',
  uniqueViolation: '23505',
} as const;

export async function connectCreating(
  databaseUrl: string,
  onCreated: (database: string) => void,
): Promise<{ client: pg.Client; databaseCreated: boolean }> {
  try {
    return { client: await connect(databaseUrl), databaseCreated: false };
  } catch (error) {
    const missing = error instanceof DatabaseUnreachableError && errorCode(error.cause);
    if (missing !== pgErrors.invalidCatalogName) throw error;
  }
  const database = databaseOf(new URL(databaseUrl));
  const databaseCreated = await createDatabase(databaseUrl, database);
  if (databaseCreated) onCreated(database);
  return { client: await connect(databaseUrl), databaseCreated };
}

/** False when another process created it first (42P04, or 23505 at the same instant). */
async function createDatabase(databaseUrl: string, database: string): Promise<boolean> {
  const maintenance = new URL(databaseUrl);
  maintenance.pathname = '/postgres';
  const client = await connect(maintenance.toString());
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

/** Connects, or throws DatabaseUnreachableError naming the host, never the URL. */
async function connect(connectionString: string): Promise<pg.Client> {
  const client = new pg.Client({
    connectionString,
    connectionTimeoutMillis: 10_000,
    application_name: 'perks-worker migrate',
  });
  // A connection dropped while idle must not crash the process with an unhandled 'error'.
  client.on('error', () => undefined);
  try {
    await client.connect();
  } catch (error) {
    throw unreachable(connectionString, error);
  }
  return client;
}

const databaseOf = (url: URL) => decodeURIComponent(url.pathname.replace(/^\//, '')) || 'postgres';

function unreachable(databaseUrl: string, cause: unknown): DatabaseUnreachableError {
  const url = new URL(databaseUrl);
  const port = url.port ? Number(url.port) : 5432;
  return new DatabaseUnreachableError(url.hostname || 'localhost', port, databaseOf(url), cause);
}
