/**
 * Environment -> typed, validated configuration; the only module that reads `process.env`.
 * The typed config is derived from the declarations in config/variables.ts (each variable's
 * `group` and `key`). Commands ask only for the groups they use: `migrate` needs no API key.
 */
import { readFileSync } from 'node:fs';
import { isIPv4 } from 'node:net';
import type { z } from 'zod';
import { clientSecretSchema } from './config/api.js';
import type { ConfigGroup, VariableSpec } from './config/define.js';
import { type VariableName, type Variables, variables } from './config/variables.js';
import { InputError } from './errors.js';

export { type ConfigGroup, configGroups } from './config/define.js';
export { configTable, type VariableName, variables } from './config/variables.js';

type Env = Readonly<Record<string, string | undefined>>;

type Value<N extends VariableName> = z.output<Variables[N]['schema']>;
type KeyIn<G extends ConfigGroup, N extends VariableName> = Variables[N]['group'] extends G
  ? Variables[N]['key']
  : never;

/** The parsed values of one group's variables, each under its `key`; optional when unset-able. */
type GroupValues<G extends ConfigGroup> = {
  -readonly [N in VariableName as undefined extends Value<N> ? never : KeyIn<G, N>]: Value<N>;
} & {
  -readonly [N in VariableName as undefined extends Value<N> ? KeyIn<G, N> : never]?: Value<N>;
};

/** The client secret is resolved from its variable or its file: one string, never logged. */
export type PerksConfig = Omit<GroupValues<'perks'>, 'clientSecret' | 'clientSecretFile'> & {
  clientSecret: string;
};
export type RedisConfig = GroupValues<'redis'>;
export type DatabaseConfig = GroupValues<'database'>;
export type WorkerConfig = GroupValues<'worker'>;
export type LogConfig = GroupValues<'log'>;

export interface Config {
  perks: PerksConfig;
  consumerIds: GroupValues<'consumerIds'>;
  redis: RedisConfig;
  database: DatabaseConfig;
  worker: WorkerConfig;
  intake: GroupValues<'intake'>;
  events: GroupValues<'events'>;
  log: LogConfig;
}

/** One problem with one variable, safe to print: it never holds a secret's value. */
export interface ConfigProblem {
  variable: string;
  problem: string;
  example: string;
}

export class ConfigError extends InputError {
  override readonly name = 'ConfigError';
  constructor(readonly problems: readonly ConfigProblem[]) {
    super(problems.map(formatProblem).join('\n'));
  }
}

function formatProblem({ variable, problem, example }: ConfigProblem): string {
  return `${variable} ${problem} (example: ${variable}=${example})`;
}

/**
 * Reads the variables of `groups` from `env` and returns them typed. Throws one ConfigError
 * listing every missing or invalid variable at once. Groups not asked for are not read.
 */
export function loadConfig<G extends ConfigGroup>(
  groups: readonly G[],
  env: Env = process.env,
): Pick<Config, G> {
  const problems: ConfigProblem[] = [];
  const config: Partial<Record<ConfigGroup, Record<string, unknown>>> = {};
  for (const group of groups) config[group] = {};
  for (const [name, spec] of Object.entries(variables) as [VariableName, VariableSpec][]) {
    const values = config[spec.group];
    if (!values) continue;
    const raw = readVariable(env, name, spec);
    const parsed = spec.schema.safeParse(raw);
    if (parsed.success) {
      values[spec.key] = parsed.data;
      continue;
    }
    const shown = spec.secret ? '' : `, got ${JSON.stringify(redactUrl(raw ?? ''))}`;
    const message = parsed.error.issues[0]?.message ?? 'bad value';
    problems.push({
      variable: name,
      problem: raw === undefined ? 'is not set' : `is invalid: ${message}${shown}`,
      example: spec.example,
    });
  }
  problems.push(...combinationProblems(config, problems));
  if (config.perks) {
    config.perks.clientSecret = resolveClientSecret(env, config.perks, problems) ?? '';
    delete config.perks.clientSecretFile;
  }
  if (problems.length > 0) throw new ConfigError(problems);
  return config as Pick<Config, G>;
}

/** The rules that involve more than one variable, for the variables that parsed. */
function combinationProblems(
  { perks, events, redis }: Partial<Record<ConfigGroup, Record<string, unknown>>>,
  found: readonly ConfigProblem[],
): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  const invalid = (variable: VariableName, problem: string, got: string, example?: string) =>
    problems.push({
      variable,
      problem: `is invalid: ${problem}, got ${JSON.stringify(redactUrl(got))}`,
      example: example ?? variables[variable].example,
    });
  if (typeof perks?.baseUrl === 'string' && !perks.insecureHttp && insecure(perks.baseUrl)) {
    invalid(
      'PERKS_BASE_URL',
      'must be https:// (plain http would send the client secret in clear; it is accepted for a loopback host, or with PERKS_INSECURE_HTTP=allow)',
      perks.baseUrl,
    );
  }
  if (typeof events?.webhookUrl === 'string' && insecure(events.webhookUrl)) {
    invalid(
      'WEBHOOK_URL',
      'must be https:// unless its host is loopback (events would travel in clear)',
      events.webhookUrl,
    );
  }
  const prefix = redis?.queuePrefix;
  if (
    Array.isArray(redis?.clusterNodes) &&
    typeof prefix === 'string' &&
    !/^\{[^{}]+\}/.test(prefix)
  ) {
    invalid(
      'QUEUE_PREFIX',
      "with REDIS_CLUSTER_NODES it must start with a hash tag such as {perks}, so that every key of a queue lands in one slot (BullMQ's scripts touch several keys at once)",
      prefix,
      '{perks}',
    );
  }
  const named = new Set([...found, ...problems].map((p) => p.variable));
  const webhookHalf =
    events && (events.webhookUrl === undefined) !== (events.webhookSecret === undefined);
  if (webhookHalf && !named.has('WEBHOOK_URL') && !named.has('WEBHOOK_SECRET')) {
    const [set, unset] = events.webhookUrl
      ? (['WEBHOOK_URL', 'WEBHOOK_SECRET'] as const)
      : (['WEBHOOK_SECRET', 'WEBHOOK_URL'] as const);
    problems.push({
      variable: unset,
      problem: `is not set, and ${set} is: webhooks need both`,
      example: variables[unset].example,
    });
  }
  return problems;
}

/** True for a loopback host: 127.0.0.0/8, ::1 or localhost. */
export function isLoopbackHost(hostname: string): boolean {
  const host = hostname.replace(/^\[(.*)\]$/, '$1').toLowerCase();
  if (host === 'localhost' || host === '::1') return true;
  return isIPv4(host) && host.startsWith('127.');
}

/**
 * Whether an outbound URL would travel in clear to another machine: plain http to a host that
 * is not loopback. Every outbound URL the worker is given obeys the same rule.
 */
export function insecure(url: string): boolean {
  const { protocol, hostname } = new URL(url);
  return protocol === 'http:' && !isLoopbackHost(hostname);
}

/** The warning `work` logs at every start while PERKS_INSECURE_HTTP=allow is in use. */
export function insecureHttpWarning(perks: PerksConfig): string | undefined {
  if (!perks.insecureHttp || !insecure(perks.baseUrl)) return undefined;
  return `PERKS_BASE_URL is plain http to ${new URL(perks.baseUrl).host} (PERKS_INSECURE_HTTP=allow): the client secret and tokens travel in clear`;
}

/** A value as it may be shown: the password of a URL (`//user:password@`) never is. */
export function redactUrl(value: string): string {
  return value.replace(/(\/\/[^/@\s]*?):[^/@\s]*@/g, '$1:***@');
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
  perks: Record<string, unknown>,
  problems: ConfigProblem[],
): string | undefined {
  if (typeof perks.clientSecret === 'string') return perks.clientSecret;
  if (env.PERKS_CLIENT_SECRET?.trim()) return undefined; // invalid: already reported
  const file = perks.clientSecretFile;
  const fileProblem = (problem: string) =>
    problems.push({
      variable: 'PERKS_CLIENT_SECRET_FILE',
      problem,
      example: variables.PERKS_CLIENT_SECRET_FILE.example,
    });
  if (typeof file !== 'string') {
    problems.push({
      variable: 'PERKS_CLIENT_SECRET',
      problem: 'is not set (nor PERKS_CLIENT_SECRET_FILE)',
      example: variables.PERKS_CLIENT_SECRET.example,
    });
    return undefined;
  }
  let secret: string;
  try {
    secret = readFileSync(file, 'utf8').trim();
  } catch (error) {
    const reason = (error as NodeJS.ErrnoException).code ?? 'unreadable';
    fileProblem(`is invalid: cannot read ${JSON.stringify(file)} (${reason})`);
    return undefined;
  }
  const parsed = clientSecretSchema.safeParse(secret);
  if (!parsed.success) {
    fileProblem(`is invalid: the file's content must have the form sk_<env>_...`);
    return undefined;
  }
  return parsed.data;
}
