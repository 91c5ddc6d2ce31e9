/**
 * Environment -> typed, validated configuration; the only module that reads `process.env`.
 * The typed config is derived from the declarations in config/variables.ts (each variable's
 * `group` and `key`). Commands ask only for the groups they use: `migrate` needs no API key.
 */
import { readFileSync } from 'node:fs';
import { isIPv4 } from 'node:net';
import type { z } from 'zod';
import type { ConfigGroup, VariableSpec } from './config/define.js';
import { type VariableName, type Variables, variables } from './config/variables.js';
import { InputError } from './errors.js';

export { type ConfigGroup, configGroups } from './config/define.js';
export { configTable, type VariableName, variables } from './config/variables.js';

type Env = Readonly<Record<string, string | undefined>>;
type Loaded = Partial<Record<ConfigGroup, Record<string, unknown>>>;

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

/**
 * Client id and secret are resolved from their variable or their file (the secret never logged);
 * a file's path is kept only when it was read, to be read again (`rereadCredentials`).
 */
export type PerksConfig = Omit<GroupValues<'perks'>, 'clientId' | 'clientSecret'> &
  PerksCredentials;
export type PerksCredentials = { clientId: string; clientSecret: string };
export type RedisConfig = GroupValues<'redis'>;
export type DatabaseConfig = GroupValues<'database'>;
export type JobsConfig = GroupValues<'jobs'>;
export type WorkerConfig = GroupValues<'worker'>;
export type LogConfig = GroupValues<'log'>;
export type Config = { [G in Exclude<ConfigGroup, 'perks'>]: GroupValues<G> } & {
  perks: PerksConfig;
};

/** One problem with one variable, safe to print: it never holds a secret's value. */
export type ConfigProblem = { variable: string; problem: string; example: string };

const formatProblem = ({ variable, problem, example }: ConfigProblem) =>
  `${variable} ${problem} (example: ${variable}=${example})`;

export class ConfigError extends InputError {
  override readonly name = 'ConfigError';
  constructor(readonly problems: readonly ConfigProblem[]) {
    super(problems.map(formatProblem).join('\n'));
  }
}

const problemOf = (variable: VariableName, problem: string, example?: string): ConfigProblem => ({
  variable,
  problem,
  example: example ?? variables[variable].example,
});

/** "is invalid: <reason>", and the value when it may be shown (with no URL password). */
const invalid = (reason: string, got?: string) =>
  `is invalid: ${reason}${got === undefined ? '' : `, got ${JSON.stringify(shownValue(got))}`}`;

/** A URL's password masked and its query cut: either may carry a secret (a receiver's token). */
const shownValue = (value: string) =>
  value.includes('://') ? redactUrl(value).replace(/\?.*$/s, '?…') : value;

/**
 * Reads the variables of `groups` from `env` and returns them typed. Throws one ConfigError
 * listing every missing or invalid variable at once. Groups not asked for are not read.
 */
export function loadConfig<G extends ConfigGroup>(
  groups: readonly G[],
  env: Env = process.env,
): Pick<Config, G> {
  const problems: ConfigProblem[] = [];
  const config: Loaded = Object.fromEntries(groups.map((group) => [group, {}]));
  for (const [name, spec] of Object.entries(variables) as [VariableName, VariableSpec][]) {
    const values = config[spec.group];
    if (!values) continue;
    // An empty variable (`FOO=` in a compose file) means "not set", not "set to nothing".
    const raw = env[name]?.trim() || spec.default;
    const parsed = spec.schema.safeParse(raw);
    if (parsed.success) {
      values[spec.key] = parsed.data;
      continue;
    }
    const reason = parsed.error.issues[0]?.message ?? 'bad value';
    const problem =
      raw === undefined ? 'is not set' : invalid(reason, spec.secret ? undefined : raw);
    problems.push(problemOf(name, problem));
  }
  problems.push(...combinationProblems(config, problems));
  if (config.perks) resolveCredentials(env, config.perks, problems);
  if (problems.length > 0) throw new ConfigError(problems);
  return config as Pick<Config, G>;
}

/** The rules that involve more than one variable, for the variables that parsed. */
function combinationProblems(
  { perks, events, redis, worker, intake }: Loaded,
  found: readonly ConfigProblem[],
): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  // The HTTP intake is a server of its own, beside the ops server (0: a port picked for each):
  // on one port, only on two addresses neither of which is every interface's.
  const wildcard = (host: unknown) => host === '0.0.0.0' || host === '::';
  const sharedHost =
    intake?.host === worker?.opsHost || wildcard(intake?.host) || wildcard(worker?.opsHost);
  const samePort = intake?.port !== 0 && intake?.port === worker?.port;
  if (intake?.token !== undefined && samePort && sharedHost) {
    const reason = 'must differ from PORT, where the ops server listens (on OPS_HOST)';
    problems.push(problemOf('INTAKE_PORT', invalid(reason, String(intake?.port))));
  }
  if (typeof perks?.baseUrl === 'string' && !perks.insecureHttp && insecure(perks.baseUrl)) {
    const reason =
      'must be https:// (plain http would send the client secret in clear; it is accepted for a loopback host, or with PERKS_INSECURE_HTTP=allow)';
    problems.push(problemOf('PERKS_BASE_URL', invalid(reason, perks.baseUrl)));
  }
  if (typeof events?.webhookUrl === 'string' && insecure(events.webhookUrl)) {
    const reason = 'must be https:// unless its host is loopback (events would travel in clear)';
    problems.push(problemOf('WEBHOOK_URL', invalid(reason, events.webhookUrl)));
  }
  const prefix = redis?.queuePrefix;
  if (redis?.clusterNodes && typeof prefix === 'string' && !/^\{[^{}]+\}/.test(prefix)) {
    const reason =
      "with REDIS_CLUSTER_NODES it must start with a hash tag such as {perks}, so that every key of a queue lands in one slot (BullMQ's scripts touch several keys at once)";
    problems.push(problemOf('QUEUE_PREFIX', invalid(reason, prefix), '{perks}'));
  }
  const named = new Set([...found, ...problems].map((p) => p.variable));
  const half = (events?.webhookUrl === undefined) !== (events?.webhookSecret === undefined);
  if (half && !named.has('WEBHOOK_URL') && !named.has('WEBHOOK_SECRET')) {
    const set = events?.webhookUrl ? 'WEBHOOK_URL' : 'WEBHOOK_SECRET';
    const unset = set === 'WEBHOOK_URL' ? 'WEBHOOK_SECRET' : 'WEBHOOK_URL';
    problems.push(problemOf(unset, `is not set, and ${set} is: webhooks need both`));
  }
  return problems;
}

/**
 * Whether an outbound URL would travel in clear to another machine: plain http to a host that
 * is not loopback (127.0.0.0/8, ::1, localhost). Every outbound URL obeys the same rule.
 */
function insecure(url: string): boolean {
  const { protocol, hostname } = new URL(url);
  const host = hostname.replace(/^\[(.*)\]$/, '$1').toLowerCase();
  const loopback =
    host === 'localhost' || host === '::1' || (isIPv4(host) && host.startsWith('127.'));
  return protocol === 'http:' && !loopback;
}

/** The warning `work` logs at every start while PERKS_INSECURE_HTTP=allow is in use. */
export function insecureHttpWarning(perks: PerksConfig): string | undefined {
  if (!perks.insecureHttp || !insecure(perks.baseUrl)) return undefined;
  return `PERKS_BASE_URL is plain http to ${new URL(perks.baseUrl).host} (PERKS_INSECURE_HTTP=allow): the client secret and tokens travel in clear`;
}

/**
 * A value as it may be shown: the password of a URL (`//user:password@`) never is, a raw `@`
 * or `/` in it included, nor a query parameter whose name says it holds one (`?password=`, which
 * pg and ioredis take; `sslpassword`, `access_token`, `api_key`, %-encoded or not). A port
 * followed by an `@` in the path is masked with it. Linear in the text: no pattern here
 * backtracks over more than one parameter.
 */
export function redactUrl(value: string): string {
  return value
    .replace(/(\/\/[^/?#@\s:]*):[^\s@]*@(?:[^\s@/?#]*@)*/g, '$1:***@')
    .replace(/([?&])([^=&#?\s]*)=([^&#\s]*)/g, (all, mark: string, name: string) =>
      secretName(name) ? `${mark}${name}=***` : all,
    );
}

const secretWords = new Set(
  'pass password passwd pwd secret token key sig signature auth authorization credential credentials apikey sslpassword sslkey accesstoken'.split(
    ' ',
  ),
);

function secretName(name: string): boolean {
  let decoded = name;
  try {
    decoded = decodeURIComponent(name);
  } catch {
    // Not %-encoded after all: the name as written.
  }
  return decoded
    .toLowerCase()
    .split(/[^a-z0-9]+/)
    .some((word) => secretWords.has(word));
}

const credentialVariables = {
  clientId: 'PERKS_CLIENT_ID',
  clientSecret: 'PERKS_CLIENT_SECRET',
} as const;

/**
 * Each credential from its variable, else from its `_FILE`, whose path is then kept to be read
 * again (`rereadCredentials`); a file's content is checked as the variable's would be.
 */
function resolveCredentials(env: Env, perks: Record<string, unknown>, problems: ConfigProblem[]) {
  for (const [key, name] of Object.entries(credentialVariables)) {
    const [value, file] = [perks[key], perks[`${key}File`]];
    if (typeof value === 'string' || typeof file !== 'string') delete perks[`${key}File`];
    if (typeof value === 'string') continue;
    perks[key] = '';
    if (env[name]?.trim()) continue; // invalid: already reported
    if (typeof file !== 'string') {
      problems.push(problemOf(name, `is not set (nor ${name}_FILE)`));
      continue;
    }
    let reason: string;
    try {
      const parsed = variables[name].schema.safeParse(readFileSync(file, 'utf8').trim());
      if (parsed.success) {
        perks[key] = parsed.data;
        continue;
      }
      reason = `the file's content ${parsed.error.issues[0]?.message}`;
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code ?? 'unreadable';
      reason = `cannot read ${JSON.stringify(file)} (${code})`;
    }
    problems.push(problemOf(`${name}_FILE`, invalid(reason)));
  }
}

/** The credentials now: those given as files read again (a rotation rewrote them). */
export function rereadCredentials(perks: PerksConfig): PerksCredentials {
  const problems: ConfigProblem[] = [];
  const again: Record<string, unknown> = { ...perks };
  for (const key of Object.keys(credentialVariables)) if (again[`${key}File`]) delete again[key];
  resolveCredentials({}, again, problems);
  if (problems.length > 0) throw new ConfigError(problems);
  const { clientId, clientSecret } = again as PerksCredentials;
  return { clientId, clientSecret };
}
