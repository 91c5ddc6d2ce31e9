/**
 * A PgBouncer of its own for a test file, in transaction pooling mode, in front of the test
 * PostgreSQL: Debian's `pgbouncer` (`.ci/run` installs it), on a free port, with trust auth
 * and a `*` database entry, so any database of the server is reachable through it. It sets no
 * `ignore_startup_parameters`: a client sending a startup option it does not know is refused,
 * as by a stock PgBouncer.
 *
 * PgBouncer refuses to run as root: as root it runs as `postgres` (`su`), from a temporary
 * directory that user can read.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';

const binary = '/usr/sbin/pgbouncer';
/** The user PgBouncer runs as when the tests run as root. */
const runAs = 'postgres';

export interface PgBouncer {
  readonly port: number;
  /** `url` (a URL of the PostgreSQL behind it) with its host and port replaced by PgBouncer's. */
  urlFor(url: string): string;
  /** SHOW STATS from PgBouncer's admin console: what went through it, per database. */
  stats(): Promise<{ database: string; total_xact_count: string }[]>;
  /** PgBouncer's own log so far, for failure messages. */
  log(): string;
  stop(): Promise<void>;
}

export interface PgBouncerOptions {
  /** The PostgreSQL server behind it. */
  target: { host: string; port: number };
  /** The user the tests connect as (listed in its auth file). */
  user: string;
  /** Server connections per database and user (default_pool_size). Default 10. */
  poolSize?: number;
}

export async function startPgBouncer(options: PgBouncerOptions): Promise<PgBouncer> {
  if (!existsSync(binary)) {
    throw new Error(
      `pgbouncer not found at ${binary}: install Debian's package (apt-get install pgbouncer; .ci/run does)`,
    );
  }
  const port = await freePort();
  const dir = await mkdtemp(join(tmpdir(), 'perks-pgbouncer-'));
  // Readable by the user PgBouncer runs as; it writes nothing there (log on stderr).
  await chmod(dir, 0o755);
  const ini = join(dir, 'pgbouncer.ini');
  const userlist = join(dir, 'userlist.txt');
  await writeFile(userlist, `"${options.user}" ""\n`, { mode: 0o644 });
  await writeFile(
    ini,
    [
      '[databases]',
      `* = host=${options.target.host} port=${options.target.port}`,
      '',
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      'auth_type = trust',
      `auth_file = ${userlist}`,
      `admin_users = ${options.user}`,
      'pool_mode = transaction',
      `default_pool_size = ${options.poolSize ?? 10}`,
      'max_client_conn = 500',
      '',
    ].join('\n'),
    { mode: 0o644 },
  );

  const child: ChildProcess =
    process.getuid?.() === 0
      ? spawn('su', [runAs, '-s', '/bin/sh', '-c', `exec ${binary} ${ini}`], {
          stdio: ['ignore', 'pipe', 'pipe'],
        })
      : spawn(binary, [ini], { stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  const append = (chunk: Buffer) => {
    log = (log + chunk.toString()).slice(-100_000);
  };
  child.stdout?.on('data', append);
  child.stderr?.on('data', append);
  let running = true;
  const exited = new Promise<void>((resolve) =>
    child.on('exit', () => {
      running = false;
      resolve();
    }),
  );

  const url = (database: string) => `postgres://${options.user}@127.0.0.1:${port}/${database}`;
  const stop = async () => {
    if (running) {
      // SHUTDOWN ends it at once; `su` forwards a SIGTERM too, but only exits 2 s later.
      await adminQuery(url('pgbouncer'), 'shutdown').catch(() => child.kill('SIGTERM'));
      await Promise.race([exited, new Promise((r) => setTimeout(r, 5000))]);
      if (running) child.kill('SIGKILL');
    }
    await rm(dir, { recursive: true, force: true });
  };

  try {
    await waitForPort(port, () => running, 10_000);
  } catch (error) {
    await stop();
    throw new Error(`pgbouncer did not start (${String(error)}):\n${log}`);
  }
  return {
    port,
    urlFor(target: string) {
      const parsed = new URL(target);
      parsed.hostname = '127.0.0.1';
      parsed.port = String(port);
      return parsed.toString();
    },
    stats: async () =>
      (await adminQuery(url('pgbouncer'), 'show stats')) as {
        database: string;
        total_xact_count: string;
      }[],
    log: () => log,
    stop,
  };
}

/** The admin console speaks the simple query protocol only: a query without parameters. */
async function adminQuery(url: string, command: string): Promise<Record<string, unknown>[]> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000 });
  client.on('error', () => undefined);
  await client.connect();
  try {
    return (await client.query(command)).rows;
  } finally {
    await client.end().catch(() => undefined);
  }
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  await new Promise((resolve) => server.close(resolve));
  if (address === null || typeof address === 'string') throw new Error('no free port');
  return address.port;
}

async function waitForPort(port: number, alive: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (!alive()) throw new Error('it exited');
    const open = await new Promise<boolean>((resolve) => {
      const socket = new Socket();
      const done = (result: boolean) => {
        socket.destroy();
        resolve(result);
      };
      socket.once('connect', () => done(true));
      socket.once('error', () => done(false));
      socket.connect(port, '127.0.0.1');
    });
    if (open) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`port ${port} not open after ${timeoutMs} ms`);
}
