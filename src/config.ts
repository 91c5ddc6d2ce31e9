/**
 * Environment -> typed, validated configuration. The only module that reads `process.env`.
 *
 * Every variable is declared once in `variables` with its description, default and an
 * example; the README's configuration table mirrors this list (a unit test keeps them in
 * step). Commands ask only for the groups they use, so `migrate` needs no API credentials.
 */
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { maxConsumersPerSyncJob } from './queues/names.js';

type Env = Readonly<Record<string, string | undefined>>;

interface VariableSpec {
  /** Which group of settings it belongs to; a command loads only the groups it needs. */
  group: ConfigGroup;
  description: string;
  /** The default, as written in the environment; absent means required (or optional). */
  default?: string;
  /** Shown in error messages and the README. Never a real secret. */
  example: string;
  /** Secret values are never echoed back, not even when invalid. */
  secret?: boolean;
}

export type ConfigGroup = keyof Config;

/** Every environment variable perks-worker reads, in README order. */
export const variables = {
  PERKS_BASE_URL: {
    group: 'perks',
    description: 'Base URL of the Perks API for your program (sandbox or production).',
    example: 'https://api.perks.example/programs/acme',
  },
  PERKS_CLIENT_ID: {
    group: 'perks',
    description: 'API client id from the administration console.',
    example: 'cli_3f9a1c',
  },
  PERKS_CLIENT_SECRET: {
    group: 'perks',
    description: 'API client secret (`sk_<env>_...`). Set this or PERKS_CLIENT_SECRET_FILE.',
    example: 'sk_sandbox_xxxxxxxx',
    secret: true,
  },
  PERKS_CLIENT_SECRET_FILE: {
    group: 'perks',
    description: 'Path of a file holding the client secret (Docker/Kubernetes secrets).',
    example: '/run/secrets/perks_client_secret',
  },
  PERKS_API_VERSION: {
    group: 'perks',
    description: 'Value of the mandatory `x-api-version` header.',
    default: '2.0.0',
    example: '2.0.0',
  },
  PERKS_TIMEOUT_MS: {
    group: 'perks',
    description: 'Timeout of one HTTP request to the API, in milliseconds.',
    default: '10000',
    example: '10000',
  },
  PERKS_RETRY_ATTEMPTS: {
    group: 'perks',
    description:
      'Attempts of one idempotent API call on 500/502/503/504 and transport errors, inside a job.',
    default: '4',
    example: '4',
  },
  PERKS_RETRY_MAX_MS: {
    group: 'perks',
    description: 'Upper bound on the time one API call spends retrying, in milliseconds.',
    default: '30000',
    example: '30000',
  },
  PERKS_CONNECTIONS: {
    group: 'perks',
    description:
      'Keep-alive connections to the API per process: at most this many requests at once. At least ENROLL_CONCURRENCY + SYNC_CONCURRENCY lets no job wait for a connection; fewer caps the API concurrency.',
    default: '32',
    example: '32',
  },
  PERKS_CONSUMER_ID_KEY: {
    group: 'consumerIds',
    description:
      'HMAC key deriving consumer ids from user ids that are not valid consumer ids. Required only then. Never change it once used: ids derived under another key are other consumers.',
    example: 'a-long-random-string-of-32-chars',
    secret: true,
  },
  REDIS_URL: {
    group: 'redis',
    description: 'Redis holding the BullMQ queues.',
    default: 'redis://127.0.0.1:6379',
    example: 'redis://127.0.0.1:6379',
  },
  QUEUE_PREFIX: {
    group: 'redis',
    description: 'Prefix of every queue key. Wrap it in braces (`{perks}`) for Redis Cluster.',
    default: 'perks',
    example: 'perks',
  },
  DATABASE_URL: {
    group: 'database',
    description: 'PostgreSQL datastore the rewards are written to.',
    default: 'postgres://postgres@127.0.0.1:5432/perks',
    example: 'postgres://postgres@127.0.0.1:5432/perks',
    secret: false,
  },
  DATABASE_SCHEMA: {
    group: 'database',
    description: 'Schema holding the perks tables.',
    default: 'perks',
    example: 'perks',
  },
  DATABASE_POOL_SIZE: {
    group: 'database',
    description: 'Connections in the PostgreSQL pool of one process.',
    default: '10',
    example: '10',
  },
  PERKS_RATE_LIMIT_PER_SECOND: {
    group: 'worker',
    description:
      'Global cap on jobs started per second per queue, across all replicas (BullMQ limiter). Unset: no cap.',
    example: '50',
  },
  PERKS_RECONCILE_CRON: {
    group: 'worker',
    description: 'When the reconciliation re-syncs every enrolled consumer (cron, UTC).',
    default: '0 3 * * *',
    example: '0 3 * * *',
  },
  ENROLL_CONCURRENCY: {
    group: 'worker',
    description: 'Enrollment jobs processed at once by one replica.',
    default: '10',
    example: '10',
  },
  SYNC_CONCURRENCY: {
    group: 'worker',
    description: 'Reward sync jobs processed at once by one replica.',
    default: '8',
    example: '8',
  },
  SYNC_CONSUMERS_PER_JOB: {
    group: 'worker',
    description:
      'Consumers per sync job of a reconciliation, synced at once by that job; each consumer keeps its own retries. 1 while PERKS_RATE_LIMIT_PER_SECOND is set, so that the cap counts syncs.',
    default: '8',
    example: '8',
  },
  RECONCILE_BATCH_SIZE: {
    group: 'worker',
    description: 'Consumers read and enqueued per batch by a reconciliation.',
    default: '500',
    example: '500',
  },
  RECONCILE_MAX_PENDING: {
    group: 'worker',
    description:
      'A reconciliation waits while more sync jobs than this are pending, so Redis holds a bounded number of jobs.',
    default: '2000',
    example: '2000',
  },
  JOB_ATTEMPTS: {
    group: 'worker',
    description: 'Attempts of a job before it is failed (exponential backoff between them).',
    default: '8',
    example: '8',
  },
  JOB_BACKOFF_MS: {
    group: 'worker',
    description: 'First delay of the exponential backoff between job attempts, in milliseconds.',
    default: '5000',
    example: '5000',
  },
  KEEP_COMPLETED_JOBS: {
    group: 'worker',
    description: 'Completed jobs kept per queue for inspection (the oldest are removed).',
    default: '1000',
    example: '1000',
  },
  KEEP_FAILED_JOBS: {
    group: 'worker',
    description: 'Failed jobs kept per queue for inspection and `failed --retry`.',
    default: '10000',
    example: '10000',
  },
  JOB_LOCK_MS: {
    group: 'worker',
    description:
      "How long a replica's hold on a running job lasts without renewal; the jobs of a replica that died are taken up by another after about this long.",
    default: '30000',
    example: '30000',
  },
  SHUTDOWN_TIMEOUT_MS: {
    group: 'worker',
    description:
      'On SIGTERM/SIGINT, how long active jobs may run to completion before the process exits anyway (they are then retried elsewhere).',
    default: '30000',
    example: '30000',
  },
  PORT: {
    group: 'worker',
    description: 'Port of the health and metrics HTTP server of `work`.',
    default: '9464',
    example: '9464',
  },
  DASHBOARD_USER: {
    group: 'worker',
    description: 'User name of the queue dashboard (`/dashboard`, HTTP basic auth).',
    default: 'admin',
    example: 'admin',
  },
  DASHBOARD_PASSWORD: {
    group: 'worker',
    description:
      'Password of the queue dashboard (at least 12 characters). Unset: no dashboard, `/dashboard` is 404.',
    example: 'a-long-dashboard-password',
    secret: true,
  },
  OTEL_EXPORTER_OTLP_ENDPOINT: {
    group: 'worker',
    description:
      'OpenTelemetry collector (OTLP over HTTP) receiving a trace span per job; traces go to `<endpoint>/v1/traces`. Unset: no tracing.',
    example: 'http://127.0.0.1:4318',
  },
  LOG_LEVEL: {
    group: 'log',
    description: 'fatal, error, warn, info, debug, trace or silent.',
    default: 'info',
    example: 'info',
  },
  LOG_FORMAT: {
    group: 'log',
    description: '`json` (one object a line) or `pretty` (for humans at a terminal).',
    default: 'json',
    example: 'json',
  },
} as const satisfies Record<string, VariableSpec>;

export type VariableName = keyof typeof variables;

const wholeNumber = (min: number, max: number) =>
  z.coerce
    .number({ error: 'must be a whole number' })
    .int({ error: 'must be a whole number' })
    .min(min, { error: `must be at least ${min}` })
    .max(max, { error: `must be at most ${max}` });

const httpUrl = z.url({
  protocol: /^https?$/,
  error: 'must be an absolute http(s) URL',
});

const schemas = {
  PERKS_BASE_URL: httpUrl.transform((url) => url.replace(/\/+$/, '')),
  PERKS_CLIENT_ID: z.string().min(1),
  PERKS_CLIENT_SECRET: z
    .string()
    .regex(/^sk_[A-Za-z0-9]+_\S+$/, { error: 'must have the form sk_<env>_...' })
    .optional(),
  PERKS_CLIENT_SECRET_FILE: z.string().min(1).optional(),
  PERKS_API_VERSION: z.string().regex(/^\d+\.\d+\.\d+$/, { error: 'must look like 2.0.0' }),
  PERKS_TIMEOUT_MS: wholeNumber(100, 600_000),
  PERKS_RETRY_ATTEMPTS: wholeNumber(1, 20),
  PERKS_RETRY_MAX_MS: wholeNumber(0, 3_600_000),
  PERKS_CONNECTIONS: wholeNumber(1, 1024),
  // Not refused when short (a worker that will not start is worse), but warned about: see
  // configWarnings.
  PERKS_CONSUMER_ID_KEY: z.string().min(1).optional(),
  REDIS_URL: z.url({ protocol: /^rediss?$/, error: 'must be a redis:// or rediss:// URL' }),
  QUEUE_PREFIX: z
    .string()
    .regex(/^[{}A-Za-z0-9_.-]{1,64}$/, { error: 'must be 1 to 64 of A-Z a-z 0-9 _ . - { }' }),
  DATABASE_URL: z.url({
    protocol: /^postgres(ql)?$/,
    error: 'must be a postgres:// URL',
  }),
  DATABASE_SCHEMA: z
    .string()
    .regex(/^[a-z_][a-z0-9_]{0,62}$/, { error: 'must be a lower-case SQL identifier' }),
  DATABASE_POOL_SIZE: wholeNumber(1, 200),
  PERKS_RATE_LIMIT_PER_SECOND: wholeNumber(1, 100_000).optional(),
  PERKS_RECONCILE_CRON: z
    .string()
    .regex(/^(\S+\s+){4,5}\S+$/, { error: 'must be a cron expression of 5 or 6 fields' }),
  ENROLL_CONCURRENCY: wholeNumber(1, 1000),
  SYNC_CONCURRENCY: wholeNumber(1, 1000),
  SYNC_CONSUMERS_PER_JOB: wholeNumber(1, maxConsumersPerSyncJob),
  RECONCILE_BATCH_SIZE: wholeNumber(1, 10_000),
  RECONCILE_MAX_PENDING: wholeNumber(1, 1_000_000),
  JOB_ATTEMPTS: wholeNumber(1, 100),
  JOB_BACKOFF_MS: wholeNumber(0, 3_600_000),
  KEEP_COMPLETED_JOBS: wholeNumber(0, 1_000_000),
  KEEP_FAILED_JOBS: wholeNumber(0, 1_000_000),
  JOB_LOCK_MS: wholeNumber(1000, 3_600_000),
  SHUTDOWN_TIMEOUT_MS: wholeNumber(0, 3_600_000),
  PORT: wholeNumber(0, 65_535),
  DASHBOARD_USER: z
    .string()
    .regex(/^[^:\s]{1,64}$/, { error: 'must be 1 to 64 characters, no colon or space' }),
  DASHBOARD_PASSWORD: z
    .string()
    .min(12, { error: 'must be at least 12 characters' })
    .max(256, { error: 'must be at most 256 characters' })
    .optional(),
  OTEL_EXPORTER_OTLP_ENDPOINT: httpUrl.transform((url) => url.replace(/\/+$/, '')).optional(),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']),
  LOG_FORMAT: z.enum(['json', 'pretty']),
} satisfies Record<VariableName, z.ZodType>;

export interface PerksConfig {
  baseUrl: string;
  clientId: string;
  /** Never log it: the logger redacts `clientSecret` keys, and errors never include it. */
  clientSecret: string;
  apiVersion: string;
  timeoutMs: number;
  retryAttempts: number;
  retryMaxMs: number;
  connections: number;
}
export interface WorkerConfig {
  /** Jobs started per second per queue across replicas; undefined: no cap. */
  rateLimitPerSecond: number | undefined;
  reconcileCron: string;
  enrollConcurrency: number;
  syncConcurrency: number;
  /** Consumers per sync job of a reconciliation (see `fanOutConsumersPerJob`). */
  syncConsumersPerJob: number;
  reconcileBatchSize: number;
  reconcileMaxPending: number;
  jobAttempts: number;
  jobBackoffMs: number;
  keepCompletedJobs: number;
  keepFailedJobs: number;
  jobLockMs: number;
  shutdownTimeoutMs: number;
  port: number;
  /** Basic-auth user of the dashboard (default 'admin'). */
  dashboardUser: string;
  /** Never log it. Undefined: the dashboard is off. */
  dashboardPassword?: string | undefined;
  /** OTLP/HTTP collector base URL; undefined: no tracing. */
  otlpEndpoint?: string | undefined;
}
export interface RedisConfig {
  url: string;
  queuePrefix: string;
}
export interface DatabaseConfig {
  url: string;
  schema: string;
  poolSize: number;
}
export interface LogConfig {
  level: z.infer<typeof schemas.LOG_LEVEL>;
  format: z.infer<typeof schemas.LOG_FORMAT>;
}
export interface ConsumerIdConfig {
  /** Absent when unset: then only user ids that are already valid consumer ids are accepted. */
  key: string | undefined;
}

export interface Config {
  perks: PerksConfig;
  consumerIds: ConsumerIdConfig;
  redis: RedisConfig;
  database: DatabaseConfig;
  worker: WorkerConfig;
  log: LogConfig;
}

/** One problem with one variable, safe to print: it never holds a secret's value. */
export interface ConfigProblem {
  variable: string;
  problem: string;
  example: string;
}

export class ConfigError extends Error {
  override readonly name = 'ConfigError';
  constructor(readonly problems: readonly ConfigProblem[]) {
    super(problems.map(formatProblem).join('\n'));
  }
}

function formatProblem({ variable, problem, example }: ConfigProblem): string {
  return `${variable} ${problem} (example: ${variable}=${example})`;
}

type Values = { [K in VariableName]: z.output<(typeof schemas)[K]> };

/**
 * Reads the variables of `groups` from `env` and returns them typed. Throws one ConfigError
 * listing every missing or invalid variable at once. Groups not asked for are not read.
 */
export function loadConfig<G extends ConfigGroup>(
  groups: readonly G[],
  env: Env = process.env,
): Pick<Config, G> {
  const wanted = new Set<ConfigGroup>(groups);
  const problems: ConfigProblem[] = [];
  const values: Partial<Record<VariableName, unknown>> = {};

  for (const name of Object.keys(variables) as VariableName[]) {
    const spec: VariableSpec = variables[name];
    if (!wanted.has(spec.group)) continue;
    const raw = readVariable(env, name, spec);
    const parsed = schemas[name].safeParse(raw);
    if (parsed.success) {
      values[name] = parsed.data;
      continue;
    }
    const issue = parsed.error.issues[0];
    const shown = spec.secret ? '' : `, got ${JSON.stringify(raw)}`;
    const problem =
      raw === undefined ? 'is not set' : `is invalid: ${issue?.message ?? 'bad value'}${shown}`;
    problems.push({ variable: name, problem, example: spec.example });
  }

  const v = values as Values;
  const config: Partial<Config> = {};
  if (wanted.has('perks')) {
    const secret = resolveClientSecret(env, v, problems);
    config.perks = {
      baseUrl: v.PERKS_BASE_URL,
      clientId: v.PERKS_CLIENT_ID,
      clientSecret: secret ?? '',
      apiVersion: v.PERKS_API_VERSION,
      timeoutMs: v.PERKS_TIMEOUT_MS,
      retryAttempts: v.PERKS_RETRY_ATTEMPTS,
      retryMaxMs: v.PERKS_RETRY_MAX_MS,
      connections: v.PERKS_CONNECTIONS,
    };
  }
  if (problems.length > 0) throw new ConfigError(problems);

  if (wanted.has('consumerIds')) config.consumerIds = { key: v.PERKS_CONSUMER_ID_KEY };
  if (wanted.has('redis')) config.redis = { url: v.REDIS_URL, queuePrefix: v.QUEUE_PREFIX };
  if (wanted.has('database')) {
    config.database = {
      url: v.DATABASE_URL,
      schema: v.DATABASE_SCHEMA,
      poolSize: v.DATABASE_POOL_SIZE,
    };
  }
  if (wanted.has('worker')) {
    config.worker = {
      rateLimitPerSecond: v.PERKS_RATE_LIMIT_PER_SECOND,
      reconcileCron: v.PERKS_RECONCILE_CRON,
      enrollConcurrency: v.ENROLL_CONCURRENCY,
      syncConcurrency: v.SYNC_CONCURRENCY,
      syncConsumersPerJob: v.SYNC_CONSUMERS_PER_JOB,
      reconcileBatchSize: v.RECONCILE_BATCH_SIZE,
      reconcileMaxPending: v.RECONCILE_MAX_PENDING,
      jobAttempts: v.JOB_ATTEMPTS,
      jobBackoffMs: v.JOB_BACKOFF_MS,
      keepCompletedJobs: v.KEEP_COMPLETED_JOBS,
      keepFailedJobs: v.KEEP_FAILED_JOBS,
      jobLockMs: v.JOB_LOCK_MS,
      shutdownTimeoutMs: v.SHUTDOWN_TIMEOUT_MS,
      port: v.PORT,
      dashboardUser: v.DASHBOARD_USER,
      dashboardPassword: v.DASHBOARD_PASSWORD,
      otlpEndpoint: v.OTEL_EXPORTER_OTLP_ENDPOINT,
    };
  }
  if (wanted.has('log')) config.log = { level: v.LOG_LEVEL, format: v.LOG_FORMAT };
  return config as Pick<Config, G>;
}

function readVariable(env: Env, name: VariableName, spec: VariableSpec): string | undefined {
  const value = env[name]?.trim();
  // An empty variable (`FOO=` in a compose file) means "not set", not "set to nothing".
  if (value === undefined || value === '') return spec.default;
  return value;
}

/** PERKS_CLIENT_SECRET wins; otherwise the first line of PERKS_CLIENT_SECRET_FILE. */
function resolveClientSecret(
  env: Env,
  v: Partial<Values>,
  problems: ConfigProblem[],
): string | undefined {
  if (v.PERKS_CLIENT_SECRET) return v.PERKS_CLIENT_SECRET;
  if (env.PERKS_CLIENT_SECRET?.trim()) return undefined; // invalid: already reported
  const file = v.PERKS_CLIENT_SECRET_FILE;
  const example = variables.PERKS_CLIENT_SECRET.example;
  if (!file) {
    problems.push({
      variable: 'PERKS_CLIENT_SECRET',
      problem: 'is not set (nor PERKS_CLIENT_SECRET_FILE)',
      example,
    });
    return undefined;
  }
  let secret: string;
  try {
    secret = readFileSync(file, 'utf8').trim();
  } catch (error) {
    const reason = (error as NodeJS.ErrnoException).code ?? 'unreadable';
    problems.push({
      variable: 'PERKS_CLIENT_SECRET_FILE',
      problem: `is invalid: cannot read ${JSON.stringify(file)} (${reason})`,
      example: variables.PERKS_CLIENT_SECRET_FILE.example,
    });
    return undefined;
  }
  const parsed = schemas.PERKS_CLIENT_SECRET.safeParse(secret);
  if (!parsed.success || !parsed.data) {
    problems.push({
      variable: 'PERKS_CLIENT_SECRET_FILE',
      problem: `is invalid: the file's content must have the form sk_<env>_...`,
      example: variables.PERKS_CLIENT_SECRET_FILE.example,
    });
    return undefined;
  }
  return parsed.data;
}

/** The shortest PERKS_CONSUMER_ID_KEY that is not warned about. */
export const recommendedKeyLength = 16;

/**
 * Consumers per sync job of a reconciliation's fan-out. BullMQ's limiter counts jobs, so
 * under PERKS_RATE_LIMIT_PER_SECOND each consumer keeps its own job and the cap counts syncs.
 */
export function fanOutConsumersPerJob(
  worker: Pick<WorkerConfig, 'syncConsumersPerJob' | 'rateLimitPerSecond'>,
): number {
  return worker.rateLimitPerSecond === undefined ? worker.syncConsumersPerJob : 1;
}

/**
 * Consumer syncs one replica runs at once at most: SYNC_CONCURRENCY jobs of up to
 * `fanOutConsumersPerJob` consumers each, every one writing a page at a time.
 */
export const syncsInFlight = (
  worker: Pick<WorkerConfig, 'syncConcurrency' | 'syncConsumersPerJob' | 'rateLimitPerSecond'>,
) => worker.syncConcurrency * fanOutConsumersPerJob(worker);

/**
 * Settings that work but deserve a look, for the process to log at start. Never includes a
 * secret's value.
 */
export function configWarnings(config: Partial<Pick<Config, 'consumerIds'>>): string[] {
  const warnings: string[] = [];
  const key = config.consumerIds?.key;
  if (key !== undefined && key.length < recommendedKeyLength) {
    warnings.push(
      `PERKS_CONSUMER_ID_KEY is ${key.length} characters long; use at least ${recommendedKeyLength} random characters (and never change it once used)`,
    );
  }
  return warnings;
}
