import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { demoSchemaOf } from '../../src/cli/demo.js';
import {
  ConfigError,
  configTable,
  insecureHttpWarning,
  loadConfig,
  redactUrl,
  rereadCredentials,
  variables,
} from '../../src/config.js';
import { fanOutConsumersPerJob } from '../../src/jobs/sync-rewards-batch.js';
import { consumerIdKeyWarning } from '../../src/queues/consumer-id.js';

const perksEnv = {
  PERKS_BASE_URL: 'https://api.example.test/v2/',
  PERKS_CLIENT_ID: 'cli_1',
  PERKS_CLIENT_SECRET: 'sk_sandbox_topsecretvalue',
};

function problemsOf(fn: () => unknown): string[] {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return (error as ConfigError).problems.map((p) => `${p.variable}: ${p.problem}`);
  }
  throw new Error('expected a ConfigError');
}

describe('loadConfig', () => {
  it('applies the documented defaults', () => {
    const config = loadConfig(['perks', 'redis', 'database', 'log'], perksEnv);
    expect(config.perks).toEqual({
      baseUrl: 'https://api.example.test/v2',
      clientId: 'cli_1',
      clientSecret: 'sk_sandbox_topsecretvalue',
      apiVersion: '2.0.0',
      timeoutMs: 10_000,
      retryAttempts: 4,
      retryMaxMs: 30_000,
      connections: 64,
    });
    expect(config.redis).toEqual({ url: 'redis://127.0.0.1:6379', queuePrefix: 'perks' });
    expect(config.database).toEqual({
      url: 'postgres://postgres@127.0.0.1:5432/perks',
      schema: 'perks',
      poolSize: 10,
    });
    expect(config.log).toEqual({ level: 'info', format: 'json' });
  });

  it('puts 8 consumers in a sync job of a reconciliation, and 1 under a rate cap', () => {
    const worker = (env: Record<string, string>) => loadConfig(['worker'], env).worker;
    expect(worker({}).syncConsumersPerJob).toBe(8);
    expect(fanOutConsumersPerJob(worker({}))).toBe(8);
    expect(fanOutConsumersPerJob(worker({ SYNC_CONSUMERS_PER_JOB: '20' }))).toBe(20);
    expect(
      fanOutConsumersPerJob(
        worker({ SYNC_CONSUMERS_PER_JOB: '20', PERKS_RATE_LIMIT_PER_SECOND: '50' }),
      ),
    ).toBe(1);
    expect(problemsOf(() => worker({ SYNC_CONSUMERS_PER_JOB: '101' }))).toEqual([
      expect.stringMatching(/^SYNC_CONSUMERS_PER_JOB: /),
    ]);
    expect(problemsOf(() => worker({ SYNC_CONSUMERS_PER_JOB: '0' }))).toEqual([
      expect.stringMatching(/^SYNC_CONSUMERS_PER_JOB: /),
    ]);
  });

  it('asks only for the groups a command uses', () => {
    expect(() => loadConfig(['database', 'log'], {})).not.toThrow();
    expect(problemsOf(() => loadConfig(['perks'], {}))).toEqual([
      'PERKS_BASE_URL: is not set',
      'PERKS_CLIENT_ID: is not set (nor PERKS_CLIENT_ID_FILE)',
      'PERKS_CLIENT_SECRET: is not set (nor PERKS_CLIENT_SECRET_FILE)',
    ]);
  });

  it('lists every invalid variable at once, with an example', () => {
    const env = { ...perksEnv, PERKS_TIMEOUT_MS: 'soon', REDIS_URL: 'http://x', LOG_LEVEL: 'loud' };
    let error: ConfigError | undefined;
    try {
      loadConfig(['perks', 'redis', 'log'], env);
    } catch (e) {
      error = e as ConfigError;
    }
    expect(error?.problems.map((p) => p.variable)).toEqual([
      'PERKS_TIMEOUT_MS',
      'REDIS_URL',
      'LOG_LEVEL',
    ]);
    expect(error?.message).toContain(
      'PERKS_TIMEOUT_MS is invalid: must be a whole number, got "soon" (example: PERKS_TIMEOUT_MS=10000)',
    );
  });

  it('takes decimal whole numbers only, and cluster ports from 1 to 65535', () => {
    for (const PORT of ['0x10', '1e3', '12.0', '0b1']) {
      expect(problemsOf(() => loadConfig(['worker'], { PORT }))).toEqual([
        expect.stringMatching(/^PORT: is invalid: must be a whole number, got /),
      ]);
    }
    expect(loadConfig(['worker'], { PORT: '9465' }).worker.port).toBe(9465);
    expect(
      problemsOf(() =>
        loadConfig(['redis'], { REDIS_CLUSTER_NODES: '10.0.0.1:6379,10.0.0.2:99999' }),
      ),
    ).toEqual([
      expect.stringMatching(/^REDIS_CLUSTER_NODES: is invalid: has a port past 1 to 65535/),
    ]);
  });

  it('treats an empty variable as unset', () => {
    expect(loadConfig(['redis'], { QUEUE_PREFIX: '' }).redis.queuePrefix).toBe('perks');
  });

  it('never echoes a secret, even an invalid one', () => {
    const env = { ...perksEnv, PERKS_CLIENT_SECRET: 'not-a-secret-shape-hunter2' };
    let message = '';
    try {
      loadConfig(['perks'], env);
    } catch (e) {
      message = (e as Error).message;
    }
    expect(message).toContain('PERKS_CLIENT_SECRET is invalid: must have the form sk_<env>_...');
    expect(message).not.toContain('hunter2');
  });

  it('refuses plain http to a host that is not loopback, unless PERKS_INSECURE_HTTP=allow', () => {
    const remote = { ...perksEnv, PERKS_BASE_URL: 'http://api.example.com/acme' };
    expect(problemsOf(() => loadConfig(['perks'], remote))).toEqual([
      'PERKS_BASE_URL: is invalid: must be https:// (plain http would send the client secret in clear; it is accepted for a loopback host, or with PERKS_INSECURE_HTTP=allow), got "http://api.example.com/acme"',
    ]);
    for (const url of [
      'http://127.0.0.1:4010',
      'http://127.9.0.1',
      'http://localhost:1',
      'http://[::1]:8',
    ]) {
      const { perks } = loadConfig(['perks'], { ...perksEnv, PERKS_BASE_URL: url });
      expect(insecureHttpWarning(perks), url).toBeUndefined();
    }
    const allowed = loadConfig(['perks'], { ...remote, PERKS_INSECURE_HTTP: 'allow' }).perks;
    expect(allowed.baseUrl).toBe('http://api.example.com/acme');
    expect(insecureHttpWarning(allowed)).toBe(
      'PERKS_BASE_URL is plain http to api.example.com (PERKS_INSECURE_HTTP=allow): the client secret and tokens travel in clear',
    );
    expect(
      problemsOf(() => loadConfig(['perks'], { ...remote, PERKS_INSECURE_HTTP: 'yes' })),
    ).toContain('PERKS_INSECURE_HTTP: is invalid: must be allow, or unset, got "yes"');
  });

  it('listens on OPS_HOST, 0.0.0.0 by default, and refuses what is not an address', () => {
    expect(loadConfig(['worker'], {}).worker.opsHost).toBe('0.0.0.0');
    expect(loadConfig(['worker'], { OPS_HOST: '127.0.0.1' }).worker.opsHost).toBe('127.0.0.1');
    expect(problemsOf(() => loadConfig(['worker'], { OPS_HOST: 'my host' }))).toEqual([
      'OPS_HOST: is invalid: must be an IP address to listen on (0.0.0.0, 127.0.0.1, ::) or localhost, got "my host"',
    ]);
  });

  it('refuses a URL whose user, password or path holds a % that starts no escape, naming it', () => {
    const problems = problemsOf(() =>
      loadConfig(['redis', 'database', 'events'], {
        DATABASE_URL: 'postgres://postgres@127.0.0.1:5432/db%zz',
        REDIS_URL: 'redis://:50%off@127.0.0.1:6379',
        WEBHOOK_URL: 'https://hook:50%off@hooks.example.com/perks',
        WEBHOOK_SECRET: `whsec_${Buffer.alloc(24, 7).toString('base64')}`,
      }),
    );
    const reason = 'has a % that starts no escape in its user, password or path (write % as %25)';
    expect(problems).toEqual([
      `REDIS_URL: is invalid: ${reason}, got "redis://:***@127.0.0.1:6379"`,
      `DATABASE_URL: is invalid: ${reason}, got "postgres://postgres@127.0.0.1:5432/db%zz"`,
      `WEBHOOK_URL: is invalid: ${reason}, got "https://hook:***@hooks.example.com/perks"`,
    ]);
    expect(
      loadConfig(['database'], { DATABASE_URL: 'postgres://u:50%25off@h/db' }).database.url,
    ).toBe('postgres://u:50%25off@h/db');
  });

  it('refuses INTAKE_PORT equal to PORT while the intake is on', () => {
    const env = { PORT: '9486', INTAKE_PORT: '9486', INTAKE_TOKEN: 'x'.repeat(32) };
    expect(problemsOf(() => loadConfig(['worker', 'intake'], env))).toEqual([
      'INTAKE_PORT: is invalid: must differ from PORT, where the ops server listens (on OPS_HOST), got "9486"',
    ]);
    const { INTAKE_TOKEN: _, ...off } = env;
    expect(() => loadConfig(['worker', 'intake'], off)).not.toThrow();
    const apart = { ...env, OPS_HOST: '127.0.0.1', INTAKE_HOST: '127.0.0.2' };
    expect(() => loadConfig(['worker', 'intake'], apart)).not.toThrow();
  });

  it('refuses a DATABASE_SCHEMA PostgreSQL reserves (pg_…)', () => {
    expect(problemsOf(() => loadConfig(['database'], { DATABASE_SCHEMA: 'pg_perks' }))).toEqual([
      'DATABASE_SCHEMA: is invalid: must be a lower-case SQL identifier, not pg_…, got "pg_perks"',
    ]);
  });

  it('never shows the password of a URL in an error', () => {
    const problems = problemsOf(() =>
      loadConfig(['redis', 'database'], {
        DATABASE_URL: 'mysql://u:hunter2@h/db',
        REDIS_URL: 'http://:s3cr%40t@redis:6379',
      }),
    );
    expect(problems.join('\n')).not.toMatch(/hunter2|s3cr/);
    expect(problems).toContain(
      'DATABASE_URL: is invalid: must be a postgres:// URL, got "mysql://u:***@h/db"',
    );
    expect(problems).toContain(
      'REDIS_URL: is invalid: must be a redis:// or rediss:// URL, got "http://:***@redis:6379"',
    );
  });

  it.each([
    [
      'postgres://postgres:Abc@TopSecret99@127.0.0.1:5999/db',
      'postgres://postgres:***@127.0.0.1:5999/db',
    ],
    ['redis://u:pa/ss@127.0.0.1:6379', 'redis://u:***@127.0.0.1:6379'],
    [
      'amqp://guest:guest@127.0.0.1:5672 and https://t:s3@otlp:4318',
      'amqp://guest:***@127.0.0.1:5672 and https://t:***@otlp:4318',
    ],
    ['postgres://postgres@127.0.0.1:5432/postgres', 'postgres://postgres@127.0.0.1:5432/postgres'],
    ['redis://127.0.0.1:6379/0', 'redis://127.0.0.1:6379/0'],
    ['postgres://u:p@h/db?application_name=a@b', 'postgres://u:***@h/db?application_name=a@b'],
    [
      'postgres://u@h/db?sslmode=require&password=supersecret123',
      'postgres://u@h/db?sslmode=require&password=***',
    ],
    ['redis://h:6379/?password=s3cret&db=1', 'redis://h:6379/?password=***&db=1'],
    ['https://h/hook?Access_Token=abc#x', 'https://h/hook?Access_Token=***#x'],
    ['postgres://u@h/db?p%61ssword=hunter2', 'postgres://u@h/db?p%61ssword=***'],
    ['https://h/?design=blue&monkey=1&api_key=k', 'https://h/?design=blue&monkey=1&api_key=***'],
  ])('redactUrl(%j) shows %j', (value, shown) => {
    expect(redactUrl(value)).toBe(shown);
  });

  it('redactUrl reads a server-sent text of 64 kB of query-like noise at once', () => {
    // A pattern that backtracks took minutes on this (a title of "?key" repeated).
    const noise = '?key'.repeat(16_000);
    expect(redactUrl(`${noise}=v`)).toBe(`${noise}=***`);
  });

  it('reads the client secret from PERKS_CLIENT_SECRET_FILE', () => {
    const dir = mkdtempSync(join(tmpdir(), 'perks-config-'));
    const file = join(dir, 'secret');
    writeFileSync(file, 'sk_sandbox_fromfile\n');
    const { PERKS_CLIENT_SECRET: _, ...env } = perksEnv;
    expect(
      loadConfig(['perks'], { ...env, PERKS_CLIENT_SECRET_FILE: file }).perks.clientSecret,
    ).toBe('sk_sandbox_fromfile');
    expect(
      problemsOf(() =>
        loadConfig(['perks'], { ...env, PERKS_CLIENT_SECRET_FILE: join(dir, 'missing') }),
      )[0],
    ).toMatch(/^PERKS_CLIENT_SECRET_FILE: is invalid: cannot read .* \(ENOENT\)$/);
  });

  it('reads id and secret from their files again (a rotation), the variables as they were', () => {
    const dir = mkdtempSync(join(tmpdir(), 'perks-config-'));
    const [idFile, secretFile] = [join(dir, 'id'), join(dir, 'secret')];
    writeFileSync(idFile, 'cli_a\n');
    writeFileSync(secretFile, 'sk_sandbox_a\n');
    const files = { PERKS_BASE_URL: perksEnv.PERKS_BASE_URL, PERKS_CLIENT_ID_FILE: idFile };
    const perks = loadConfig(['perks'], { ...files, PERKS_CLIENT_SECRET_FILE: secretFile }).perks;
    expect(perks).toMatchObject({ clientId: 'cli_a', clientSecret: 'sk_sandbox_a' });
    writeFileSync(idFile, 'cli_b\n');
    writeFileSync(secretFile, 'sk_sandbox_b\n');
    expect(rereadCredentials(perks)).toEqual({ clientId: 'cli_b', clientSecret: 'sk_sandbox_b' });
    // A variable wins over its file, and is not read again.
    const mixed = loadConfig(['perks'], {
      ...perksEnv,
      PERKS_CLIENT_SECRET_FILE: secretFile,
    }).perks;
    expect(rereadCredentials(mixed)).toEqual({
      clientId: 'cli_1',
      clientSecret: 'sk_sandbox_topsecretvalue',
    });
    const half = loadConfig(['perks'], { ...files, PERKS_CLIENT_SECRET: 'sk_sandbox_var' }).perks;
    writeFileSync(idFile, 'cli_c\n');
    expect(rereadCredentials(half)).toEqual({ clientId: 'cli_c', clientSecret: 'sk_sandbox_var' });
    // A file being rewritten (empty now): an error naming its variable, no value.
    writeFileSync(idFile, '');
    expect(problemsOf(() => rereadCredentials(half))).toEqual([
      "PERKS_CLIENT_ID_FILE: is invalid: the file's content must not be empty",
    ]);
  });

  it('is documented: docs/configuration.md holds the table the definitions render', () => {
    const doc = readFileSync(new URL('../../docs/configuration.md', import.meta.url), 'utf8');
    const table = /<!-- config-table:start -->\n([\s\S]*?)\n<!-- config-table:end -->/.exec(
      doc,
    )?.[1];
    // On a difference: `npm run docs` rewrites the table from src/config/.
    expect(table).toBe(configTable());
    for (const name of Object.keys(variables)) expect(table).toContain(`| \`${name}\` |`);
  });

  it('marks as required exactly the variables with no default that must be set', () => {
    expect(configTable()).toContain('| `PERKS_BASE_URL` | required |');
    expect(configTable()).toContain('| `PERKS_CLIENT_SECRET` | none |');
    expect(configTable()).toContain('| `PORT` | `9464` |');
  });

  it('accepts a short consumer id key but warns about it, without printing it', () => {
    const config = loadConfig(['consumerIds'], { PERKS_CONSUMER_ID_KEY: 'short-k' });
    expect(config.consumerIds.key).toBe('short-k');
    expect(consumerIdKeyWarning(config.consumerIds.key)).toBe(
      'PERKS_CONSUMER_ID_KEY is 7 characters long; use at least 16 random characters (and never change it once used)',
    );
    expect(consumerIdKeyWarning('k'.repeat(16))).toBeUndefined();
    expect(consumerIdKeyWarning(undefined)).toBeUndefined();
  });

  it('turns the intake on only with a token of 24 characters or more, never echoing it', () => {
    expect(loadConfig(['intake'], {}).intake).toEqual({
      port: 9465,
      host: '0.0.0.0',
      outbox: true,
      outboxPollMs: 1000,
      outboxRetentionDays: 7,
      amqpQueue: 'perks.signups',
      amqpPrefetch: 100,
    });
    const problems = problemsOf(() =>
      loadConfig(['intake'], {
        INTAKE_TOKEN: 'short-secret',
        OUTBOX: 'maybe',
        INTAKE_AMQP_URL: 'http://u:pw@h',
      }),
    );
    expect(problems).toEqual([
      'INTAKE_TOKEN: is invalid: must be at least 24 characters',
      'OUTBOX: is invalid: must be on or off, got "maybe"',
      'INTAKE_AMQP_URL: is invalid: must be an amqp:// or amqps:// URL, got "http://u:***@h"',
    ]);
  });

  it('records every event type by default, `none` or a list, and names a wrong one', () => {
    expect(loadConfig(['events'], {}).events.types).toEqual([
      'reward.created',
      'reward.status_changed',
      'reward.missing',
      'reward.restored',
    ]);
    expect(loadConfig(['events'], { EVENT_TYPES: 'none' }).events.types).toEqual([]);
    expect(
      loadConfig(['events'], { EVENT_TYPES: 'reward.missing, reward.restored' }).events.types,
    ).toEqual(['reward.missing', 'reward.restored']);
    expect(problemsOf(() => loadConfig(['events'], { EVENT_TYPES: 'reward.paid' }))[0]).toMatch(
      /^EVENT_TYPES: is invalid: must be `none` or a comma list of reward.created, /,
    );
  });

  it('keeps events 30 days by default, a number of days or `off`, and names a wrong value', () => {
    expect(loadConfig(['events'], {}).events.retentionDays).toBe(30);
    expect(loadConfig(['events'], { EVENT_RETENTION_DAYS: '7' }).events.retentionDays).toBe(7);
    expect(loadConfig(['events'], { EVENT_RETENTION_DAYS: 'off' }).events.retentionDays).toBe(
      undefined,
    );
    expect(problemsOf(() => loadConfig(['events'], { EVENT_RETENTION_DAYS: '0' }))).toEqual([
      'EVENT_RETENTION_DAYS: is invalid: must be at least 1, got "0"',
    ]);
    expect(problemsOf(() => loadConfig(['events'], { EVENT_RETENTION_DAYS: 'never' }))).toEqual([
      'EVENT_RETENTION_DAYS: is invalid: must be a whole number of days from 1 to 3650, or off, got "never"',
    ]);
  });

  it('needs WEBHOOK_URL and WEBHOOK_SECRET together, https unless loopback', () => {
    const secret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
    expect(
      loadConfig(['events'], { WEBHOOK_URL: 'http://127.0.0.1:8080/hook', WEBHOOK_SECRET: secret })
        .events.webhookUrl,
    ).toBe('http://127.0.0.1:8080/hook');
    expect(
      problemsOf(() => loadConfig(['events'], { WEBHOOK_URL: 'https://h.example/x' })),
    ).toEqual(['WEBHOOK_SECRET: is not set, and WEBHOOK_URL is: webhooks need both']);
    const problems = problemsOf(() =>
      loadConfig(['events'], { WEBHOOK_URL: 'http://hooks.example/x', WEBHOOK_SECRET: 'whsec_!!' }),
    );
    expect(problems).toHaveLength(2);
    expect(problems[0]).toBe('WEBHOOK_SECRET: is invalid: must be whsec_ followed by base64');
    expect(problems[1]).toMatch(
      /^WEBHOOK_URL: is invalid: must be https:\/\/ unless its host is loopback/,
    );
  });

  it('keeps WEBHOOK_URL as given, hides its query in errors, and wants canonical base64', () => {
    const secret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
    const url = 'https://hooks.example.com/hooks/perks/';
    expect(
      loadConfig(['events'], { WEBHOOK_URL: url, WEBHOOK_SECRET: secret }).events,
    ).toMatchObject({ webhookUrl: url });
    const token = 'http://hooks.example/x?token=abcd1234';
    const [problem] = problemsOf(() =>
      loadConfig(['events'], { WEBHOOK_URL: token, WEBHOOK_SECRET: secret }),
    );
    expect(problem).toContain('got "http://hooks.example/x?…"');
    // One that does not parse hides it too.
    const typo = 'https://hooks.example.com:99999/p?token=abcd1234';
    const [unparsed] = problemsOf(() =>
      loadConfig(['events'], { WEBHOOK_URL: typo, WEBHOOK_SECRET: secret }),
    );
    expect(unparsed).toMatch(
      /^WEBHOOK_URL: is invalid: .*got "https:\/\/hooks.example.com:99999\/p\?…"$/,
    );
    // 33 base64 characters: Node decodes them, Python's standardwebhooks refuses them.
    expect(
      problemsOf(() => loadConfig(['events'], { WEBHOOK_SECRET: `${secret.slice(0, -1)}ab` })),
    ).toEqual([
      'WEBHOOK_SECRET: is invalid: must be whsec_ followed by padded base64 (a multiple of 4 characters)',
    ]);
  });

  it('reads REDIS_CLUSTER_NODES, and then refuses a QUEUE_PREFIX without a hash tag, saying why', () => {
    const REDIS_CLUSTER_NODES = '10.0.0.1:6379, redis-2.internal:7000';
    expect(loadConfig(['redis'], { REDIS_CLUSTER_NODES, QUEUE_PREFIX: '{perks}' }).redis).toEqual({
      url: 'redis://127.0.0.1:6379',
      queuePrefix: '{perks}',
      clusterNodes: [
        { host: '10.0.0.1', port: 6379 },
        { host: 'redis-2.internal', port: 7000 },
      ],
    });
    const problems = problemsOf(() =>
      loadConfig(['redis'], { REDIS_CLUSTER_NODES, QUEUE_PREFIX: 'perks' }),
    );
    expect(problems).toEqual([
      expect.stringMatching(
        /^QUEUE_PREFIX: is invalid: with REDIS_CLUSTER_NODES it must start with a hash tag such as \{perks\}, so that every key of a queue lands in one slot/,
      ),
    ]);
    // The default prefix is refused too: a cluster needs one chosen.
    expect(problemsOf(() => loadConfig(['redis'], { REDIS_CLUSTER_NODES }))).toHaveLength(1);
    expect(loadConfig(['redis'], { QUEUE_PREFIX: 'perks' }).redis.clusterNodes).toBeUndefined();
  });

  it('takes PERKS_RECONCILE_CRON=off (no schedule) besides a cron expression', () => {
    expect(loadConfig(['worker'], { PERKS_RECONCILE_CRON: 'off' }).worker.reconcileCron).toBe(
      'off',
    );
    expect(loadConfig(['worker'], {}).worker.reconcileCron).toBe('0 3 * * *');
    expect(() => loadConfig(['worker'], { PERKS_RECONCILE_CRON: 'never' })).toThrow(
      /PERKS_RECONCILE_CRON is invalid: must be a cron expression of 5 or 6 fields, or off/,
    );
    // Five fields, one out of range: refused here, not when `work` registers the schedule.
    expect(
      problemsOf(() => loadConfig(['worker'], { PERKS_RECONCILE_CRON: '99 * * * *' })),
    ).toEqual([
      'PERKS_RECONCILE_CRON: is invalid: must be a cron expression of 5 or 6 fields, or off: Constraint error, got value 99 expected range 0-59, got "99 * * * *"',
    ]);
    expect(
      loadConfig(['worker'], { PERKS_RECONCILE_CRON: '*/15 * * * *' }).worker.reconcileCron,
    ).toBe('*/15 * * * *');
  });

  it('refuses an INTAKE_HOST that is not an address, and a REDIS_URL whose database is not a number', () => {
    expect(problemsOf(() => loadConfig(['intake'], { INTAKE_HOST: 'bogus.invalid' }))).toEqual([
      'INTAKE_HOST: is invalid: must be an IP address to listen on (0.0.0.0, 127.0.0.1, ::) or localhost, got "bogus.invalid"',
    ]);
    expect(
      problemsOf(() => loadConfig(['redis'], { REDIS_URL: 'redis://127.0.0.1:6379/abc' })),
    ).toEqual([
      'REDIS_URL: is invalid: must name its database by number (redis://host:6379/0), if at all, got "redis://127.0.0.1:6379/abc"',
    ]);
    expect(problemsOf(() => loadConfig(['redis'], { REDIS_URL: 'localhost:6379' }))).toEqual([
      'REDIS_URL: is invalid: must be a redis:// or rediss:// URL, got "localhost:6379"',
    ]);
    expect(loadConfig(['redis'], { REDIS_URL: 'redis://127.0.0.1:6379/2' }).redis.url).toBe(
      'redis://127.0.0.1:6379/2',
    );
  });
});

describe('the demo schema', () => {
  it.each([
    ['perks', 'perks_demo'],
    ['p'.repeat(63), `${'p'.repeat(58)}_demo`],
    [`${'p'.repeat(58)}_demo`, `${'p'.repeat(57)}_demo2`],
  ])('of %j is %j, never the schema itself', (schema, demo) => {
    expect(demoSchemaOf(schema)).toBe(demo);
    expect(demo.length).toBeLessThanOrEqual(63);
  });
});
