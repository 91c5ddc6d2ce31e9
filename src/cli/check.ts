/**
 * `perks-worker check`: the configuration, then every service `work` would use, one line each.
 * A broken configuration group is reported, never thrown, and only the checks that need it
 * are skipped. Every check is bounded (check-result.ts), so an unreachable host costs seconds.
 */
import type { VariableSpec } from '../config/define.js';
import {
  type Config,
  ConfigError,
  type ConfigGroup,
  type ConfigProblem,
  configGroups,
  insecureHttpWarning,
  loadConfig,
  variables,
} from '../config.js';
import { consumerIdKeyWarning } from '../queues/consumer-id.js';
import { checkPerksApi, checkRabbitmq, checkWebhook } from './check-edges.js';
import {
  type CheckResult,
  describeError,
  fail,
  formatLine,
  pass,
  scrub,
  skip,
} from './check-result.js';
import { checkDatabase, checkDirectDatabase, checkRedis } from './check-stores.js';
import { environmentOf } from './program.js';

export interface CheckOptions {
  json?: boolean;
}

export async function run(options: CheckOptions): Promise<number> {
  const { config, problems } = loadEachGroup();
  const secrets = secretsOf(config);
  const checks = [configurationResults(config, problems), ...serviceChecks(config)];
  const results: CheckResult[] = [];
  // Started together, reported in order: the slowest check sets the time, not their sum.
  for (const check of checks) {
    for (const result of [await check].flat()) {
      const clean = scrub(result, secrets);
      results.push(clean);
      if (!options.json) process.stdout.write(`${formatLine(clean)}\n`);
    }
  }
  const ok = results.every((r) => r.ok);
  if (options.json) process.stdout.write(`${JSON.stringify({ ok, checks: results }, null, 2)}\n`);
  // A host that accepted and never answered may hold a socket open: it must not hold the exit.
  setTimeout(() => process.exit(), 1000).unref();
  return ok ? 0 : 1;
}

/** Every group `work` loads: what passes here is what `work` will accept. */
type LoadedConfig = Partial<Pick<Config, (typeof configGroups)[number]>>;

/** Each group on its own, so that one bad variable costs only the checks needing its group. */
function loadEachGroup(): { config: LoadedConfig; problems: ConfigProblem[] } {
  const config: LoadedConfig = {};
  const problems: ConfigProblem[] = [];
  for (const group of configGroups) {
    try {
      Object.assign(config, loadConfig([group]));
    } catch (error) {
      if (!(error instanceof ConfigError)) throw error;
      problems.push(...error.problems);
    }
  }
  return { config, problems };
}

function configurationResults(config: LoadedConfig, problems: ConfigProblem[]): CheckResult[] {
  if (problems.length > 0) {
    return problems.map(({ variable, problem, example }) =>
      fail(
        'configuration',
        undefined,
        `${variable} ${problem}`,
        `set ${variable}, e.g. ${variable}=${example}`,
      ),
    );
  }
  // What `work` logs as warnings at start is worth seeing here too.
  const warnings = [
    config.perks && insecureHttpWarning(config.perks),
    consumerIdKeyWarning(config.consumerIds?.key),
  ].filter((w): w is string => w !== undefined);
  const count = environmentOf(configGroups).length;
  const note = warnings.map((w) => `; warning: ${w}`).join('');
  return [pass('configuration', undefined, `${count} variables valid${note}`)];
}

/** One promise per line (or pair of lines), none of which rejects. */
function serviceChecks(config: LoadedConfig): Promise<CheckResult | CheckResult[]>[] {
  const { redis, database, perks, intake, events } = config;
  const check = <C>(
    names: string[],
    group: C | undefined,
    run: (group: C) => Promise<CheckResult | CheckResult[]>,
  ) =>
    group === undefined
      ? Promise.resolve(names.map((name) => skip(name, undefined, notChecked)))
      : run(group).catch((error: unknown) =>
          fail(
            names[0] ?? '',
            undefined,
            `check failed (${describeError(error)})`,
            'report this as a bug',
          ),
        );
  return [
    check(['redis'], redis, checkRedis),
    check(['postgres', 'schema'], database, checkDatabase),
    ...(database?.directUrl
      ? [check(['postgres direct'], database.directUrl, checkDirectDatabase)]
      : []),
    check(['perks api'], perks, checkPerksApi),
    check(['rabbitmq'], intake, (intake) => checkRabbitmq(intake.amqpUrl)),
    check(['webhook'], events, (events) => checkWebhook(events.webhookUrl)),
  ];
}

const notChecked = 'not checked (its configuration is invalid, see above)';

/**
 * Values no line may show: every variable declared secret, and the password of every URL
 * (decoded, as a server might echo it). Masked again in each result, whatever produced it.
 */
function secretsOf(config: LoadedConfig): string[] {
  const values: string[] = [];
  const byGroup = config as Partial<Record<ConfigGroup, Record<string, unknown>>>;
  for (const spec of Object.values(variables) as VariableSpec[]) {
    const value = byGroup[spec.group]?.[spec.key];
    if (typeof value !== 'string') continue;
    if (spec.secret) values.push(value);
    else if (/^[a-z]+:\/\//.test(value)) {
      const password = URL.canParse(value) ? new URL(value).password : '';
      if (password) values.push(password, decodeURIComponent(password));
    }
  }
  return values;
}
