/**
 * `perks-worker check` as a user runs it: the built bin against the sandbox, a fresh database,
 * Redis and RabbitMQ, with one thing broken at a time. Spawned asynchronously: the sandbox
 * answers from this very process.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync } from 'node:fs';
import { createServer as createHttpServer, type Server } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { createServer as createTcpServer, type Socket, type Server as TcpServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadMigrationFiles, migrate } from '../../src/store/migrate.js';
import { type ProcessRig, runCli, startProcessRig } from '../support/processes.js';
import { amqpUrl, ensureBroker } from '../support/rabbitmq.js';

/** `perks-worker check`, killed after 25 s: every check has its own timeout well below. */
const runCheck = (env: Record<string, string>, args: string[] = []) =>
  runCli(['check', ...args], env, { timeoutMs: 25_000 });

/** The line of one check, e.g. `line(out, 'redis')` -> `✓ redis redis://...: reachable (7.2.4)`. */
function line(stdout: string, name: string): string {
  const found = stdout.split('\n').filter((l) => new RegExp(`^[✓✗-] ${name}[ :]`).test(l));
  expect(found, `one "${name}" line in:\n${stdout}`).toHaveLength(1);
  return found[0] as string;
}

async function listen<S extends Server | TcpServer>(
  server: S,
): Promise<{ server: S; port: number }> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  return { server, port: typeof address === 'object' && address ? address.port : 0 };
}

/** A port nothing listens on: taken, then released. */
async function closedPort(): Promise<number> {
  const { server, port } = await listen(createTcpServer());
  await new Promise((resolve) => server.close(resolve));
  return port;
}

const webhookSecret = `whsec_${randomBytes(24).toString('base64')}`;

let rig: ProcessRig;
/** Methods the test receiver saw: check must never POST an event to it. */
const seen: string[] = [];
let receiver: Server;
let receiverUrl: string;
/** Accepts connections and never says a word: a host that hangs. */
let silent: TcpServer;
let silentPort: number;
const silentSockets = new Set<Socket>();
let missingPort: number;

beforeAll(async () => {
  rig = await startProcessRig({ sandbox: { seed: 7 } });
  const started = await listen(
    createHttpServer((req, res) => {
      seen.push(req.method ?? '');
      res.writeHead(req.method === 'POST' ? 204 : 405).end();
    }),
  );
  receiver = started.server;
  receiverUrl = `http://127.0.0.1:${started.port}/hooks/perks`;
  const hanging = await listen(createTcpServer((socket) => silentSockets.add(socket)));
  silent = hanging.server;
  silentPort = hanging.port;
  missingPort = await closedPort();
});

afterAll(async () => {
  receiver?.closeAllConnections();
  await new Promise((resolve) => receiver?.close(resolve));
  for (const socket of silentSockets) socket.destroy();
  await new Promise((resolve) => silent?.close(resolve));
  await rig?.close();
});

describe('perks-worker check', () => {
  it('passes every check of a good setup, and skips what is not configured', async () => {
    const { status, stdout, stderr } = await runCheck(rig.workerEnv());
    expect(stderr).toBe('');
    expect(line(stdout, 'configuration')).toMatch(/^✓ configuration: \d+ variables valid$/);
    expect(line(stdout, 'redis')).toMatch(/^✓ redis redis:\/\/\S+: reachable \(\d+\.\d+/);
    expect(line(stdout, 'postgres')).toMatch(/^✓ postgres postgres:\/\/\S+: reachable \(\d+/);
    expect(line(stdout, 'schema')).toMatch(
      /^✓ schema perks: migrated \(at \d{6}, \d+ migrations\)$/,
    );
    expect(line(stdout, 'perks api')).toMatch(
      /^✓ perks api http:\/\/127\.0\.0\.1:\d+: token minted; a GET .* \(404 ERR-404-0[02]/,
    );
    expect(line(stdout, 'rabbitmq')).toBe('- rabbitmq: not configured (INTAKE_AMQP_URL unset)');
    expect(line(stdout, 'webhook')).toBe('- webhook: not configured (WEBHOOK_URL unset)');
    expect(stdout).not.toContain('✗');
    expect(stdout).not.toContain(rig.sandbox.clientSecret);
    expect(status).toBe(0);
  });

  it('gives the same as one JSON object with --json', async () => {
    const { status, stdout } = await runCheck(rig.workerEnv(), ['--json']);
    const report = JSON.parse(stdout) as {
      ok: boolean;
      checks: { name: string; ok: boolean; skipped?: boolean; detail: string; fix?: string }[];
    };
    expect(report.ok).toBe(true);
    expect(report.checks.map((c) => c.name)).toEqual([
      'configuration',
      'redis',
      'postgres',
      'schema',
      'perks api',
      'rabbitmq',
      'webhook',
    ]);
    expect(report.checks.every((c) => c.ok && typeof c.detail === 'string' && !c.fix)).toBe(true);
    expect(report.checks.filter((c) => c.skipped).map((c) => c.name)).toEqual([
      'rabbitmq',
      'webhook',
    ]);
    expect(status).toBe(0);
  });

  it('fails on a wrong client secret, says how to fix it, and never prints the secret', async () => {
    const secret = `sk_sandbox_${randomBytes(12).toString('hex')}`;
    const env = rig.workerEnv({ PERKS_CLIENT_SECRET: secret });
    const { status, stdout, stderr } = await runCheck(env);
    expect(line(stdout, 'perks api')).toMatch(
      /^✗ perks api http:\/\/127\.0\.0\.1:\d+: token mint refused \(401 ERR-401-00: Unauthorized\) — fix: check PERKS_CLIENT_ID and PERKS_CLIENT_SECRET/,
    );
    expect(line(stdout, 'redis')).toMatch(/^✓/);
    expect(status).toBe(1);
    const json = await runCheck(env, ['--json']);
    const api = JSON.parse(json.stdout) as {
      ok: boolean;
      checks: { name: string; ok: boolean; fix?: string }[];
    };
    expect(api.ok).toBe(false);
    expect(api.checks.find((c) => c.name === 'perks api')).toMatchObject({ ok: false });
    expect(json.status).toBe(1);
    for (const text of [stdout, stderr, json.stdout, json.stderr])
      expect(text).not.toContain(secret);
  });

  it('says a schema is not migrated, or how many migrations are pending', async () => {
    const fresh = await runCheck(rig.workerEnv({ DATABASE_SCHEMA: 'check_never_migrated' }));
    expect(line(fresh.stdout, 'schema')).toMatch(
      /^✗ schema check_never_migrated: not migrated \(0 of \d+ migrations\) — fix: run perks-worker migrate$/,
    );
    expect(fresh.status).toBe(1);

    // A schema migrated by an older release: only the first migration applied.
    const files = await loadMigrationFiles();
    const first = files[0];
    if (!first) throw new Error('no migration files');
    await rig.store.pool.query(`create schema check_behind;
      create table check_behind.schema_migrations (version text primary key, name text not null,
        applied_at timestamptz not null default now(), checksum text not null)`);
    await rig.store.pool.query(
      'insert into check_behind.schema_migrations (version, name, checksum) values ($1, $2, $3)',
      [first.version, first.name, first.checksum],
    );
    const behind = await runCheck(rig.workerEnv({ DATABASE_SCHEMA: 'check_behind' }));
    expect(line(behind.stdout, 'schema')).toMatch(
      new RegExp(
        `^✗ schema check_behind: ${files.length - 1} migrations? pending \\(${files[1]?.file}.*\\) — fix: run perks-worker migrate$`,
      ),
    );
    expect(behind.status).toBe(1);

    // Every migration applied, but a function as an older build left it.
    const staleEnv = rig.workerEnv({ DATABASE_SCHEMA: 'check_stale' });
    await migrate({ databaseUrl: staleEnv.DATABASE_URL ?? '', schema: 'check_stale' });
    await rig.store.pool.query(
      `update check_stale.schema_repeatable_migrations set checksum = 'older' where file = $1`,
      ['datastore_summary.sql'],
    );
    const stale = await runCheck(staleEnv);
    expect(line(stale.stdout, 'schema')).toBe(
      "✗ schema check_stale: functions not this build's (datastore_summary.sql) — fix: run perks-worker migrate",
    );
    expect(stale.status).toBe(1);

    // A later release migrated it further: its functions are that release's, which this build's
    // migrate keeps, so they are not stale and the schema still serves this build.
    await rig.store.pool.query(
      `insert into check_stale.schema_migrations (version, name, checksum) values ('999999', 'later', 'x')`,
    );
    const later = await runCheck(staleEnv);
    expect(line(later.stdout, 'schema')).toBe(
      `✓ schema check_stale: migrated (at 999999, ${files.length + 1} migrations, 1 from a later release)`,
    );
  });

  it('fails on a Redis that refuses connections, and goes on with the other checks', async () => {
    const { status, stdout } = await runCheck(
      rig.workerEnv({ REDIS_URL: `redis://127.0.0.1:${missingPort}` }),
    );
    expect(line(stdout, 'redis')).toMatch(
      new RegExp(
        `^✗ redis redis://127\\.0\\.0\\.1:${missingPort}: unreachable \\(.*ECONNREFUSED.*\\) — fix: start Redis, or correct REDIS_URL$`,
      ),
    );
    expect(line(stdout, 'postgres')).toMatch(/^✓/);
    expect(line(stdout, 'perks api')).toMatch(/^✓/);
    expect(status).toBe(1);
  });

  it('gives up on hosts that accept a connection and never answer, within seconds', async () => {
    const env = rig.workerEnv({
      REDIS_URL: `redis://127.0.0.1:${silentPort}`,
      DATABASE_URL: `postgres://postgres:pg-password-123@127.0.0.1:${silentPort}/perks`,
      WEBHOOK_URL: `http://127.0.0.1:${silentPort}/hook`,
      WEBHOOK_SECRET: webhookSecret,
    });
    const { status, stdout, ms } = await runCheck(env);
    expect(line(stdout, 'redis')).toMatch(/^✗ redis \S+: unreachable \(no answer within \d+ ms\)/);
    expect(line(stdout, 'postgres')).toMatch(
      new RegExp(
        `^✗ postgres postgres://postgres:\\*\\*\\*@127\\.0\\.0\\.1:${silentPort}/perks: unreachable \\(no answer`,
      ),
    );
    expect(line(stdout, 'schema')).toMatch(/^- schema perks: not checked/);
    expect(line(stdout, 'webhook')).toMatch(/^✗ webhook \S+: unreachable \(no answer within/);
    expect(stdout).not.toContain('pg-password-123');
    expect(status).toBe(1);
    expect(ms).toBeLessThan(12_000);
  });

  it('reports each configuration problem on its own line, and checks what does not need it', async () => {
    const { status, stdout, stderr } = await runCheck(
      rig.workerEnv({ PERKS_BASE_URL: '', DATABASE_POOL_SIZE: '0' }),
    );
    const problems = stdout.split('\n').filter((l) => l.startsWith('✗ configuration:'));
    expect(problems).toEqual([
      '✗ configuration: PERKS_BASE_URL is not set — fix: set PERKS_BASE_URL, e.g. PERKS_BASE_URL=https://api.perks.example/programs/acme',
      '✗ configuration: DATABASE_POOL_SIZE is invalid: must be at least 1, got "0" — fix: set DATABASE_POOL_SIZE, e.g. DATABASE_POOL_SIZE=10',
    ]);
    expect(line(stdout, 'perks api')).toMatch(/^- perks api: not checked/);
    expect(line(stdout, 'postgres')).toMatch(/^- postgres: not checked/);
    expect(line(stdout, 'redis')).toMatch(/^✓ redis/);
    expect(stderr).toBe('');
    expect(status).toBe(1);
  });

  it('exits 2 on a usage error', async () => {
    const { status, stderr } = await runCheck(rig.workerEnv(), ['--bogus']);
    expect(stderr).toBe("perks-worker: check: Unknown option '--bogus'\n");
    expect(status).toBe(2);
  });

  describe('RabbitMQ, when INTAKE_AMQP_URL is set', () => {
    beforeAll(() => ensureBroker(), 90_000);

    it('passes when the broker accepts the login, without showing the password', async () => {
      const { status, stdout } = await runCheck(rig.workerEnv({ INTAKE_AMQP_URL: amqpUrl }));
      expect(line(stdout, 'rabbitmq')).toMatch(
        /^✓ rabbitmq amqps?:\/\/[^:]+:\*\*\*@\S+: reachable$/,
      );
      expect(stdout).not.toContain(`:${new URL(amqpUrl).password}@`);
      expect(status).toBe(0);
    });

    it('fails on a wrong password, and on a broker that is not there', async () => {
      const wrong = new URL(amqpUrl);
      wrong.password = 'not-the-password';
      const refused = await runCheck(rig.workerEnv({ INTAKE_AMQP_URL: wrong.toString() }));
      expect(line(refused.stdout, 'rabbitmq')).toMatch(
        /^✗ rabbitmq \S+: login refused \(ACCESS_REFUSED\) — fix: check the user and password in INTAKE_AMQP_URL$/,
      );
      expect(refused.stdout).not.toContain('not-the-password');
      expect(refused.status).toBe(1);

      const gone = await runCheck(
        rig.workerEnv({ INTAKE_AMQP_URL: `amqp://guest:guest@127.0.0.1:${missingPort}` }),
      );
      expect(line(gone.stdout, 'rabbitmq')).toMatch(
        /^✗ rabbitmq amqp:\/\/guest:\*\*\*@127\.0\.0\.1:\d+: unreachable \(.*ECONNREFUSED.*\) — fix: check INTAKE_AMQP_URL/,
      );
      expect(gone.status).toBe(1);
    });
  });

  describe('the webhook receiver, when WEBHOOK_URL is set', () => {
    it('passes on any HTTP answer, and delivers no event', async () => {
      seen.length = 0;
      const { status, stdout } = await runCheck(
        rig.workerEnv({
          WEBHOOK_URL: `${receiverUrl}?token=query-token-xyz`,
          WEBHOOK_SECRET: webhookSecret,
        }),
      );
      expect(line(stdout, 'webhook')).toBe(
        `✓ webhook ${receiverUrl}: reachable (HEAD answered 405)`,
      );
      expect(seen).toEqual(['HEAD']);
      expect(stdout).not.toContain('query-token-xyz');
      expect(stdout).not.toContain(webhookSecret);
      expect(status).toBe(0);
    });

    it('fails when nothing listens there', async () => {
      const url = `http://127.0.0.1:${missingPort}/hooks/perks`;
      const { status, stdout } = await runCheck(
        rig.workerEnv({ WEBHOOK_URL: url, WEBHOOK_SECRET: webhookSecret }),
      );
      expect(line(stdout, 'webhook')).toMatch(
        /^✗ webhook \S+: unreachable \(.*ECONNREFUSED.*\) — fix: check WEBHOOK_URL, and that this machine can reach it$/,
      );
      expect(status).toBe(1);
    });

    it('fails on TLS to a server that does not speak it', async () => {
      const url = receiverUrl.replace('http:', 'https:');
      const { status, stdout } = await runCheck(
        rig.workerEnv({ WEBHOOK_URL: url, WEBHOOK_SECRET: webhookSecret }),
      );
      expect(line(stdout, 'webhook')).toMatch(
        /^✗ webhook https:\S+: TLS failed \(ERR_SSL_\w+\) — fix: check the scheme and port in WEBHOOK_URL/,
      );
      expect(status).toBe(1);
    });

    it('fails on a certificate it does not trust', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'check-tls-'));
      execFileSync(
        'openssl',
        [
          'req',
          '-x509',
          '-newkey',
          'rsa:2048',
          '-nodes',
          '-days',
          '1',
          '-subj',
          '/CN=127.0.0.1',
          '-keyout',
          join(dir, 'key.pem'),
          '-out',
          join(dir, 'cert.pem'),
        ],
        { stdio: 'ignore' },
      );
      const tls = await listen(
        createHttpsServer(
          { key: readFileSync(join(dir, 'key.pem')), cert: readFileSync(join(dir, 'cert.pem')) },
          (_req, res) => res.writeHead(204).end(),
        ),
      );
      try {
        const { status, stdout } = await runCheck(
          rig.workerEnv({
            WEBHOOK_URL: `https://127.0.0.1:${tls.port}/hook`,
            WEBHOOK_SECRET: webhookSecret,
          }),
        );
        expect(line(stdout, 'webhook')).toMatch(
          /^✗ webhook \S+: TLS failed \(\w+\) — fix: the server's certificate is not trusted/,
        );
        expect(status).toBe(1);
      } finally {
        await new Promise((resolve) => tls.server.close(resolve));
      }
    });
  });
});
