/** Runs the built `perks-worker` bin as a user would (npm test builds it first). */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, inject, it } from 'vitest';
import { testQueuePrefix } from '../support/redis.js';

const bin = fileURLToPath(new URL('../../dist/src/index.js', import.meta.url));

function run(args: string[], env: Record<string, string> = {}) {
  const result = spawnSync(process.execPath, [bin, ...args], {
    env: { PATH: process.env.PATH ?? '', ...env },
    encoding: 'utf8',
    timeout: 20_000,
  });
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

const commandNames = [
  'work',
  'check',
  'migrate',
  'enroll',
  'sync',
  'reconcile',
  'status',
  'failed',
  'events',
  'sandbox',
  'demo',
];

describe('perks-worker CLI', () => {
  it('lists its commands', () => {
    const { status, stdout } = run(['--help']);
    expect(status).toBe(0);
    for (const name of commandNames) {
      expect(stdout).toMatch(new RegExp(`^  ${name} `, 'm'));
    }
  });

  it('names a missing required variable in one line and exits non-zero', () => {
    const { status, stderr } = run(['work'], {
      PERKS_CLIENT_ID: 'cli_1',
      PERKS_CLIENT_SECRET: 'sk_sandbox_abc',
    });
    expect(status).toBe(2);
    expect(stderr.trim().split('\n')).toEqual([
      'perks-worker: PERKS_BASE_URL is not set (example: PERKS_BASE_URL=https://api.perks.example/programs/acme)',
    ]);
    expect(stderr).not.toMatch(/\bat .*\.js:\d+/); // no stack trace
  });

  it('rejects an unknown command in one line, suggesting the nearest', () => {
    const { status, stdout, stderr } = run(['enrol']);
    expect(status).toBe(2);
    expect(stdout).toBe('');
    expect(stderr).toBe(
      `perks-worker: unknown command "enrol"; did you mean 'enroll'? run 'perks-worker --help'\n`,
    );
    expect(run(['stauts']).stderr).toContain("did you mean 'status'?");
    expect(run(['frobnicate']).stderr).toBe(
      `perks-worker: unknown command "frobnicate"; run 'perks-worker --help'\n`,
    );
    const help = run(['help', 'enrol']);
    expect(help).toEqual({
      status: 2,
      stdout: '',
      stderr: `perks-worker: unknown command "enrol"; did you mean 'enroll'? run 'perks-worker --help'\n`,
    });
  });

  it('prints its usage to stderr when given no command, exit 2', () => {
    const { status, stdout, stderr } = run([]);
    expect(status).toBe(2);
    expect(stdout).toBe('');
    expect(stderr).toMatch(/^Usage: perks-worker <command>/);
  });

  it('answers --version and -V with the package version', async () => {
    const { version } = (await import('../../package.json', { with: { type: 'json' } })).default;
    for (const flag of ['--version', '-V']) {
      const { status, stdout } = run([flag]);
      expect(status).toBe(0);
      expect(stdout).toBe(`perks-worker ${version}\n`);
    }
  });

  it('answers help <command> as <command> --help, listing the variables it reads', () => {
    for (const name of commandNames) {
      const help = run(['help', name]);
      expect(help.status, name).toBe(0);
      expect(help.stdout).toBe(run([name, '--help']).stdout);
    }
    const migrate = run(['help', 'migrate']).stdout;
    expect(migrate).toMatch(/^Environment \(docs\/configuration.md\):\n {2}DATABASE_URL, /m);
    expect(migrate).not.toContain('PERKS_CLIENT_SECRET');
    const work = run(['help', 'work']).stdout;
    expect(work).toContain('PERKS_CLIENT_SECRET');
    // Producers read the policy their jobs carry, not the process settings of `work`.
    const enroll = run(['help', 'enroll']).stdout;
    for (const name of ['PORT', 'DASHBOARD_PASSWORD', 'OTEL_SERVICE_NAME', 'ENROLL_CONCURRENCY']) {
      expect(work).toMatch(new RegExp(`\\b${name}\\b`));
      expect(enroll).not.toMatch(new RegExp(`\\b${name}\\b`));
    }
    expect(enroll).toMatch(
      /\bJOB_ATTEMPTS, JOB_BACKOFF_MS, KEEP_COMPLETED_JOBS, KEEP_FAILED_JOBS,/,
    );
    expect(run(['help', 'status']).stdout).toContain('REDIS_URL');
  }, 120_000); // two dozen processes: on a loaded 2-core machine that outlasts the default 30 s

  it.each([
    [['enroll'], 'perks-worker: enroll: missing <user-id>'],
    [
      ['enroll', 'a1', '--consent', 'FOO'],
      'perks-worker: enroll: --consent "FOO" is not a consent (one of BASIC, TRANSACTION_TRIGGERS, TARGETING, STATISTICS, SMART_RANKING, WEB_ANALYTICS)',
    ],
    [
      ['enroll', 'a1', '--consent', 'TARGETTING'],
      'perks-worker: enroll: --consent "TARGETTING" is not a consent (one of BASIC, TRANSACTION_TRIGGERS, TARGETING, STATISTICS, SMART_RANKING, WEB_ANALYTICS); did you mean TARGETING?',
    ],
    [
      ['enroll', 'a1', '--consent', 'BASIC', '--remove-consent', 'BASIC'],
      'perks-worker: invalid enrollment payload: removedConsents: BASIC is also an extra consent',
    ],
    [
      ['enroll', 'alice@example.com'],
      'perks-worker: userId: this user id is not a valid consumer id (2-100 of [a-zA-Z0-9_-]), so it must be derived, and PERKS_CONSUMER_ID_KEY is not set',
    ],
    [
      ['enroll', `${'a'.repeat(10_000)}@x`],
      'perks-worker: invalid enrollment payload: userId: must be at most 256 characters',
    ],
    [
      ['sync', 'bad id'],
      'perks-worker: sync: <consumer-id> "bad id" is not a consumer id (2 to 100 of a-z A-Z 0-9 _ -)',
    ],
    [['sync', 'a', 'b'], 'perks-worker: sync: unexpected argument "b"'],
    [['work', '--bogus'], "perks-worker: work: Unknown option '--bogus'"],
    [['status', '--jsn'], "perks-worker: status: Unknown option '--jsn'; did you mean --json?"],
    [
      ['failed', '--limit', '0'],
      'perks-worker: failed: --limit must be a whole number from 1 to 10000, got "0"',
    ],
    [
      ['demo', '--customers', 'many'],
      'perks-worker: demo: --customers must be a whole number from 1 to 100000, got "many"',
    ],
  ])('refuses %j in one line, exit 2', (args, message) => {
    const { status, stderr } = run(args, { REDIS_URL: inject('redisUrl') });
    expect(stderr).toBe(`${message}\n`);
    expect(status).toBe(2);
  });

  it('says in one line that the sandbox cannot listen on --host', () => {
    const result = run(['sandbox', '--port', '0', '--host', 'bogus.invalid']);
    expect(result.stderr).toBe(
      'perks-worker: --host bogus.invalid cannot be listened on (ENOTFOUND): give an address of this host, such as 0.0.0.0 (every interface) or 127.0.0.1\n',
    );
    expect(result.status).toBe(1);
  });

  it('says a sync already pending absorbed the request, enqueueing nothing', async () => {
    const queues = testQueuePrefix();
    try {
      const env = { REDIS_URL: queues.redisUrl, QUEUE_PREFIX: queues.prefix };
      const first = run(['sync', 'sbx_0007'], env);
      const again = run(['sync', 'sbx_0007'], env);
      const job = /^enqueued reward sync of consumer sbx_0007 \(job (sync-sbx_0007-\w+)\)\n$/.exec(
        first.stdout,
      )?.[1];
      expect(job).toBeDefined();
      expect(again.stdout).toBe(
        `reward sync of consumer sbx_0007 already waiting or running (job ${job}): not enqueued again (a running one is followed by another)\n`,
      );
    } finally {
      await queues.cleanup();
    }
  });

  it('says in one line that Redis or Postgres cannot be reached, exit 1', () => {
    const redis = run(['enroll', 'c_1'], { REDIS_URL: 'redis://127.0.0.1:1' });
    expect(redis.stderr).toBe(
      'perks-worker: cannot reach Redis at redis://127.0.0.1:1: connect ECONNREFUSED 127.0.0.1:1\n',
    );
    expect(redis.status).toBe(1);
    const postgres = run(['migrate'], {
      DATABASE_URL: 'postgres://postgres:hunter2@127.0.0.1:1/perks',
    });
    expect(postgres.stderr).toMatch(
      /^perks-worker: migrate: cannot reach PostgreSQL at 127\.0\.0\.1:1 /,
    );
    expect(postgres.stderr).not.toContain('hunter2');
    expect(postgres.status).toBe(1);
  });

  it('events, demo and enroll --file say in one line what they cannot reach or read', () => {
    const down = 'postgres://postgres:hunter2@127.0.0.1:1/perks';
    for (const args of [['events'], ['events', 'replay', '--from', '1']]) {
      const events = run(args, {
        DATABASE_URL: down,
        WEBHOOK_URL: 'https://hooks.example/perks',
        WEBHOOK_SECRET: `whsec_${Buffer.from('a-secret-of-32-bytes-for-tests!!').toString('base64')}`,
      });
      expect(events.stderr).toBe(
        'perks-worker: datastore postgres://postgres:***@127.0.0.1:1/perks: unavailable (connect ECONNREFUSED 127.0.0.1:1)\n',
      );
      expect(events.status).toBe(1);
    }
    const unmigrated = run(['events'], {
      DATABASE_URL: inject('adminDatabaseUrl'),
      DATABASE_SCHEMA: 'never_migrated',
    });
    expect(unmigrated.stderr).toMatch(
      /: unavailable \(schema never_migrated is not migrated: run perks-worker migrate\)\n$/,
    );
    const demo = run(['demo'], {
      REDIS_URL: 'redis://127.0.0.1:1',
      DATABASE_URL: inject('adminDatabaseUrl'),
    });
    expect(demo.stderr).toMatch(
      /^perks-worker: cannot reach Redis at redis:\/\/127\.0\.0\.1:1: connect ECONNREFUSED 127\.0\.0\.1:1\n$/m,
    );
    expect(demo.status).toBe(1);
    const directory = run(['enroll', '--file', fileURLToPath(new URL('.', import.meta.url))], {
      REDIS_URL: inject('redisUrl'),
    });
    expect(directory.stderr).toMatch(
      /^perks-worker: enroll: cannot read --file .*: it is a directory\n$/,
    );
    expect(directory.status).toBe(2);
  });

  it('answers --help on every command', () => {
    for (const name of commandNames) {
      const { status, stdout } = run([name, '--help']);
      expect(status, name).toBe(0);
      expect(stdout).toMatch(new RegExp(`^Usage: perks-worker ${name}`));
    }
  });

  it('refuses events replay without a valid --from, naming it', () => {
    const missing = run(['events', 'replay']);
    expect(missing.status).toBe(2);
    expect(missing.stderr).toBe('perks-worker: events replay: --from <event-id> is required\n');
    const bad = run(['events', 'replay', '--from', 'yesterday']);
    expect(bad.status).toBe(2);
    expect(bad.stderr).toMatch(/^perks-worker: events replay: --from must be a whole number/);
  });
});
