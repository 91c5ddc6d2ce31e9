import { describeError, errorCode, OperationalError } from '../errors.js';

export class DatabaseUnreachableError extends OperationalError {
  override readonly name = 'DatabaseUnreachableError';
  constructor(
    readonly host: string,
    readonly port: number,
    readonly database: string,
    override readonly cause: unknown,
  ) {
    // The URL is never echoed: it may carry a password.
    super(
      `cannot reach PostgreSQL at ${host}:${port} (database ${database}): ${describeError(cause)}`,
    );
  }
}

/** 42P01: no such table, 3F000: no such schema, 42883: no such function. */
const notMigrated = ['42P01', '3F000', '42883'];

/** Why the datastore could not be read, as a command says it. */
export const datastoreProblem = (error: unknown, schema: string): string =>
  notMigrated.includes(errorCode(error) ?? '')
    ? `schema ${schema} is not migrated: run perks-worker migrate`
    : describeError(error);

/** A command could not read or write the datastore: one line, exit 1. */
export class DatastoreUnavailableError extends OperationalError {
  override readonly name = 'DatastoreUnavailableError';
}

/** A migration file on disk is malformed (bad name, duplicate version). */
export class MigrationFileError extends OperationalError {
  override readonly name = 'MigrationFileError';
}

/** An applied migration's file changed since it was applied. */
export class MigrationChecksumError extends OperationalError {
  override readonly name = 'MigrationChecksumError';
  constructor(
    readonly file: string,
    readonly appliedChecksum: string,
    readonly fileChecksum: string,
  ) {
    super(
      `migration ${file} was edited after it was applied (checksum ${appliedChecksum.slice(0, 12)} in the database, ${fileChecksum.slice(0, 12)} on disk); released migrations are never edited, add a new one`,
    );
  }
}

/** PostgreSQL refused a migration statement: a right missing, a reserved schema name. */
export class MigrationRefusedError extends OperationalError {
  override readonly name = 'MigrationRefusedError';
  constructor(
    schema: string,
    readonly code: string,
    cause: unknown,
  ) {
    const hints: Record<string, string> = {
      '42501':
        'the user of DATABASE_DIRECT_URL (else DATABASE_URL) needs CREATE on the database, and CREATEDB to create it',
      '42939': 'DATABASE_SCHEMA must not start with pg_',
    };
    const hint = hints[code] ? `: ${hints[code]}` : '';
    super(`PostgreSQL refused to migrate schema ${schema}: ${describeError(cause)}${hint}`, {
      cause,
    });
  }

  /** Class 42 (a right, a name): trying again changes nothing. */
  get permanent(): boolean {
    return this.code.startsWith('42');
  }
}

/** A reward or argument the store refuses before sending anything to the database. */
export class StoreInputError extends Error {
  override readonly name = 'StoreInputError';
}

// PostgreSQL away, not refusing: its connection refused, reset or timed out (08: connection
// exception), the server shutting down or starting (57P01-57P03), its connections all taken
// (53300). A refusal of ours (a right, a password, a statement) is none of these.
const awayStates = ['57P01', '57P02', '57P03', '53300'];
const awayErrnos = [
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EPIPE',
];
// node-postgres's own words for a connection lost or never made (its errors carry no code).
const awayMessages = /^(Connection terminated|timeout exceeded when trying to connect)/;

/** Whether the database is away (it may come back), rather than refusing what was asked. */
export function isDatabaseAway(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const code = errorCode(error) ?? '';
  if (code.startsWith('08') || awayStates.includes(code) || awayErrnos.includes(code)) return true;
  if (awayMessages.test(error.message)) return true;
  // Both addresses of a host refused (IPv4 and IPv6).
  return error instanceof AggregateError && error.errors.some(isDatabaseAway);
}
