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
import { describeError } from '../errors.js';
import { consumerIdKeyWarning } from '../queues/consumer-id.js';
import { checkPerksApi, checkRabbitmq, checkWebhook } from './check-edges.js';
import type { CheckResult } from './check-result.js';
import * as line from './check-result.js';
import { checkDatabase, checkDirectDatabase, checkRedis } from './check-stores.js';
import { environmentOf } from './program.js';

export async function run(options: { json?: boolean }): Promise<number> {
  const config = loadEachGroup();
  const secrets = secretsOf(config);
  const checks = [configurationResults(config), ...serviceChecks(config)];
  const results: CheckResult[] = [];
  // Started together, reported in order: the slowest check sets the time, not their sum.
  for (const check of checks) {
    for (const result of [await check].flat()) {
      const clean = line.scrub(result, secrets);
      results.push(clean);
      if (!options.json) process.stdout.write(`${line.formatLine(clean)}\n`);
    }
  }
  const ok = results.every((r) => r.ok);
  if (options.json) process.stdout.write(`${JSON.stringify({ ok, checks: results }, null, 2)}\n`);
  // A host that accepted and never answered may hold a socket open: it must not hold the exit.
  setTimeout(() => process.exit(), 1000).unref();
  return ok ? 0 : 1;
}

/** Every group `work` loads (what passes here, `work` accepts), and the problems of the rest. */
type LoadedConfig = Partial<Pick<Config, (typeof configGroups)[number]>> & {
  problems: ConfigProblem[];
};

/** Each group on its own, so that one bad variable costs only the checks needing its group. */
function loadEachGroup(): LoadedConfig {
  const config: LoadedConfig = { problems: [] };
  for (const group of configGroups) {
    try {
      Object.assign(config, loadConfig([group]));
    } catch (error) {
      if (!(error instanceof ConfigError)) throw error;
      config.problems.push(...error.problems);
    }
  }
  return config;
}

function configurationResults({ problems, perks, consumerIds }: LoadedConfig): CheckResult[] {
  if (problems.length > 0) {
    return problems.map(({ variable, problem, example }) => {
      const fix = `set ${variable}, e.g. ${variable}=${example}`;
      return line.fail('configuration', undefined, `${variable} ${problem}`, fix);
    });
  }
  // What `work` logs as warnings at start is worth seeing here too.
  const warnings = [perks && insecureHttpWarning(perks), consumerIdKeyWarning(consumerIds?.key)];
  const note = warnings.map((w) => (w ? `; warning: ${w}` : '')).join('');
  const count = environmentOf(configGroups).length;
  return [line.pass('configuration', undefined, `${count} variables valid${note}`)];
}

/** One promise per line (or pair of lines), none of which rejects. */
function serviceChecks(config: LoadedConfig): Promise<Lines>[] {
  const { redis, database, perks, intake, events } = config;
  const check = <C>(names: string[], group: C | undefined, run: (group: C) => Promise<Lines>) =>
    group === undefined
      ? Promise.resolve(names.map((name) => line.skip(name, undefined, notChecked)))
      : run(group).catch((error: unknown) => {
          const detail = `check failed (${describeError(error)})`;
          return line.fail(names[0] ?? '', undefined, detail, 'report this as a bug');
        });
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

type Lines = CheckResult | CheckResult[];
const notChecked = 'not checked (its configuration is invalid, see above)';

/**
 * Values no line may show: every variable declared secret, and the password of every URL
 * (decoded, as a server might echo it). Masked again in each result, whatever produced it.
 */
function secretsOf(config: LoadedConfig): string[] {
  const byGroup = config as Partial<Record<ConfigGroup, Record<string, unknown>>>;
  return (Object.values(variables) as VariableSpec[]).flatMap((spec) => {
    const value = byGroup[spec.group]?.[spec.key];
    if (typeof value !== 'string') return [];
    if (spec.secret) return [value];
    const password =
      /^[a-z]+:\/\//.test(value) && URL.canParse(value) ? new URL(value).password : '';
    return password ? [password, decodeURIComponent(password)] : [];
  });
}
