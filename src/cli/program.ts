/**
 * The `perks-worker` commands and their options, declared once for commander. Nothing heavy is
 * imported here, so that --help stays fast: an action imports its command module when it runs,
 * and calls its `run` with the positionals and the parsed options.
 */

import { Command, CommanderError, Help, InvalidArgumentError } from 'commander';
import { closest, distance } from 'fastest-levenshtein';
import type { VariableSpec } from '../config/define.js';
import { type ConfigGroup, configGroups, variables } from '../config.js';
import { CONSENTS, type Consent, consentSchema } from '../perks/schemas.js';
import { type InputFormat, inputFormats } from './enroll-input.js';
import { reportUsageErrors } from './usage-errors.js';

/** What a producer session reads ('jobs': the jobs it enqueues get the worker's attempts). */
export const producerGroups = ['consumerIds', 'redis', 'jobs', 'log'] as const;

type CommandModule = Promise<{ run: (...args: never[]) => Promise<number> }>;
type Lazy = (load: () => CommandModule) => (...args: unknown[]) => Promise<void>;

/** Runs the command line `argv` (without node and the script) to its exit status. */
export async function runCli(argv: readonly string[], version: string): Promise<number> {
  let status = 0;
  // The last argument of an action is the Command itself: `run` takes the ones before it.
  const lazy: Lazy =
    (load) =>
    async (...args) => {
      status = await (await load()).run(...(args.slice(0, -1) as never[]));
    };
  try {
    const program = declare(new Command('perks-worker'), version, lazy);
    // `help <name>` of no command is refused as `perks-worker <name>` is (commander would
    // print the whole help and say nothing).
    const [first, topic] = argv;
    const unknownTopic =
      first === 'help' && topic && !program.commands.some((c) => c.name() === topic);
    await program.parseAsync(unknownTopic ? [topic] : argv, { from: 'user' });
  } catch (error) {
    // Help and --version end with exit code 0; a bare `perks-worker` shows its help and fails.
    if (error instanceof CommanderError) return error.exitCode === 0 ? 0 : 2;
    throw error;
  }
  return status;
}

function declare(program: Command, version: string, lazy: Lazy): Command {
  program
    .usage('<command> [options]')
    .version(`perks-worker ${version}`, '-V, --version', 'print the version')
    .helpOption('-h, --help', 'show this help')
    .helpCommand('help [command]', "show a command's help, as <command> --help does")
    .addHelpText('after', "\nEach command's --help lists the environment variables it reads.");
  // Each command's module is named after it, and exports its `run`.
  const command = (name: string, summary: string, description: string, groups: ConfigGroup[]) =>
    program
      .command(name)
      .summary(summary)
      .description(description)
      .addHelpText('after', () => environmentHelp(groups))
      .action(lazy(() => import(`./${name}.js`)));

  command(
    'work',
    'run the worker (enrollment, reward sync, reconciliation)',
    'Run the worker: enrollment, reward sync and reconciliation jobs, and the signup intake (HTTP, outbox table, RabbitMQ) that is configured, until SIGTERM or SIGINT. Run as many replicas as you like; they share the work through Redis.',
    [...configGroups],
  ).option(
    '--skip-migrate',
    'do not apply migrations at start (when a deploy step runs `migrate`)',
  );

  command(
    'check',
    'check the configuration, Redis, PostgreSQL, the API and the edges before running',
    'Check the configuration and every service the worker needs, before running it: Redis, PostgreSQL and its schema, a token mint and one GET against the API, RabbitMQ and the webhook URL when configured. One line per check, ✓ or ✗ with its fix; exits 0 only when all pass.',
    [...configGroups],
  ).option('--json', 'print {ok, checks: [{name, target?, ok, skipped?, detail, fix?}]}');

  command(
    'migrate',
    'create the database if needed and apply migrations',
    'Create the database named in DATABASE_DIRECT_URL (else DATABASE_URL) if it does not exist, then apply the migrations to DATABASE_SCHEMA. Idempotent, and safe when several replicas run it at once.',
    ['database', 'log'],
  );

  command(
    'enroll',
    'enqueue the enrollment of one customer, or of many from a CSV or JSON Lines file',
    'Enqueue the enrollment of one customer. <user-id> is your own customer id: used as the consumer id when it is one (2-100 of a-z A-Z 0-9 _ -), otherwise derived from it with PERKS_CONSUMER_ID_KEY. A running `perks-worker work` does the rest.\n\nWith --file (and no <user-id>), enqueue many: CSV with a header naming user_id and optionally extra_consents and removed_consents (consents `;`-separated), or JSON Lines ({"user_id": "...", "extra_consents": ["TARGETING"]}). A consumer whose enrollment is pending is not enqueued twice, so a rerun after an interruption does no harm. Bad lines are reported on stderr (`line 17: user_id: must not be empty`) and skipped. Exit status: 0; 1 when a line was bad or, with --wait, an enrollment failed; 130 when interrupted.',
    [...producerGroups],
  )
    .argument('[user-id]', 'your id of the customer (required without --file)')
    .option('--consent <consent>', `add an extra consent (repeatable): ${consentNames}`, consent)
    .option('--remove-consent <consent>', 'remove a consent (repeatable), same values', consent)
    .option('--file <path>', 'enroll every record of a CSV or JSON Lines file; - reads stdin')
    .option(
      '--format <format>',
      'csv or jsonl; default: by extension (.csv .jsonl .ndjson), else jsonl if it starts with {',
      format,
    )
    .option('--wait', 'follow the enrollments to their end and print what became of them');

  command(
    'sync',
    'enqueue a reward sync of one consumer',
    'Enqueue a reward sync of one consumer, known to the datastore or not (consumers enrolled before the worker existed can be synced too). A running `perks-worker work` does it.',
    [...producerGroups],
  ).argument('<consumer-id>', 'the Perks consumer id');

  command(
    'reconcile',
    'start a reconciliation of every enrolled consumer now',
    'Start a reconciliation now: every enrolled consumer gets a reward sync. If one is already pending or running, it is not started twice (--wait then follows that one).',
    [...producerGroups],
  ).option(
    '--wait',
    'show its progress until every consumer is synced, then its figures; exit 1 if a consumer failed or the reconciliation did (Ctrl-C stops following only: it goes on in the worker)',
  );

  command(
    'status',
    'show queue counts, the last reconciliation and failures',
    'Show a failing token mint, queue counts, the last reconciliation, jobs waiting to retry, the datastore totals, the webhook delivery lag and recent failures. Exits 1 while minting fails or the datastore is unavailable.',
    [...producerGroups, 'database', 'events'],
  ).option('--json', 'print the same as one JSON object');

  command(
    'failed',
    'list failed jobs, or retry them with --retry',
    'List the failed jobs of every queue, newest first, or retry them with --retry. A job that failed permanently (its payload, or a refusal for good by the API) is marked so, and never retried: it would fail again.',
    [...producerGroups],
  )
    .option('--retry', 'retry the listed failed jobs, except those that failed permanently')
    .option('--limit <n>', 'how many to list or retry, at most 10000', whole(1, 10_000), 50)
    .option('--json', 'print {"jobs": [...], "retried": N, "skipped": N} instead of a table');

  command(
    'events',
    'list reward events and their webhook delivery, or replay them',
    'List the latest reward events with their webhook delivery state (delivered, pending, failed; `not sent` without webhooks), newest first, then the delivery lag and the retention. `perks-worker events replay --from <id>` delivers again from an id.',
    ['database', 'events'],
  )
    .option('--failed', 'only the events given up after WEBHOOK_MAX_AGE_HOURS')
    .option('--limit <n>', 'how many to list, at most 10000', whole(1, 10_000), 20)
    .command('replay')
    .description(
      'Deliver every event from an id on again: the consumers concerned go back before it, and a running `perks-worker work` with WEBHOOK_URL set delivers them in order. Without WEBHOOK_URL here, nothing is replayed.',
    )
    .requiredOption('--from <event-id>', 'the first event id to deliver again', eventId)
    .addHelpText('after', () => environmentHelp(['database', 'events']))
    .action(lazy(async () => ({ run: (await import('./events.js')).replay })));

  command(
    'sandbox',
    'run the Perks API sandbox (simulator)',
    'Run the Perks API sandbox: a local simulator of the API, failures included.',
    ['log'],
  )
    .option('--port <n>', 'port to listen on (0 picks a free one)', whole(0, 65_535), 4010)
    .option('--host <host>', 'interface to listen on', '127.0.0.1')
    .option('--consumers <n>', 'enrolled consumers to generate, sbx_0001...', whole(0, 1e6), 50)
    .option('--seed <n>', 'seed of the generated data', whole(0, 2 ** 32 - 1), 1)
    .option('--rewards-min <n>', 'fewest rewards per generated consumer', whole(0, 1e6), 0)
    .option('--rewards-max <n>', 'most rewards per generated consumer (default 30)', whole(0, 1e6))
    .option('--rewards-on-enroll <n>', 'rewards of a consumer the API enrolls', whole(0, 1e5), 3)
    .option('--latency-ms <n>', 'delay added to every API response (default 0)', whole(0, 6e5))
    .option(
      '--rate-limit <n>',
      'requests per second per token before 429s (default none)',
      whole(1, 1e6),
    )
    .option('--token-ttl <n>', 'lifetime of access tokens in seconds', whole(1, 86_400), 3600)
    .option('--scenario <file>', 'JSON file of extra consumers, settings and faults');

  command(
    'demo',
    'run the whole job against an in-process sandbox and show the result',
    'Run the whole job against a built-in sandbox: migrate, enroll a batch of customers, sync their rewards, change some statuses upstream and reconcile, then print what Postgres holds. Needs only Redis and PostgreSQL (REDIS_URL, DATABASE_URL). Uses its own schema (<DATABASE_SCHEMA>_demo) and queue prefix (<QUEUE_PREFIX>-demo), reset at each run.',
    ['redis', 'database', 'jobs', 'worker', 'events', 'log'],
  )
    .option('--customers <n>', 'customers to enroll', whole(1, 100_000), 200)
    .option('--seed <n>', 'seed of the sandbox data', whole(1, 1_000_000), 7)
    .option('-v, --verbose', 'print the worker log lines (JSON) too');

  reportUsageErrors(program, []);
  return program;
}

/** A parser of whole numbers from `min` to `max`. */
function whole(min: number, max: number): (raw: string) => number {
  return (raw) => {
    const value = Number(raw);
    if (!/^\d+$/.test(raw) || value < min || value > max) {
      throw new InvalidArgumentError(
        `must be a whole number from ${min} to ${max}, got ${JSON.stringify(raw)}`,
      );
    }
    return value;
  };
}

/** `evt_42` or `42`, as digits. */
const eventId = (raw: string): string =>
  String(whole(1, Number.MAX_SAFE_INTEGER)(raw.replace(/^evt_/, '')));

const consentNames = CONSENTS.join(', ');

function consent(value: string, previous: Consent[] = []): Consent[] {
  const parsed = consentSchema.safeParse(value);
  if (parsed.success) return [...previous, parsed.data];
  const one = `one of ${consentNames}`;
  const near = closest(value.toUpperCase(), [...CONSENTS]);
  const hint = distance(value.toUpperCase(), near) <= 3 ? `; did you mean ${near}?` : '';
  throw new InvalidArgumentError(`${JSON.stringify(value)} is not a consent (${one})${hint}`);
}

function format(value: string): InputFormat {
  if ((inputFormats as readonly string[]).includes(value)) return value as InputFormat;
  throw new InvalidArgumentError(`must be csv or jsonl, got ${JSON.stringify(value)}`);
}

/** The variables of `groups`, in the configuration table's order. */
export function environmentOf(groups: readonly ConfigGroup[]): string[] {
  return Object.entries(variables as Record<string, VariableSpec>)
    .filter(([, v]) => groups.includes(v.group))
    .map(([name]) => name);
}

function environmentHelp(groups: readonly ConfigGroup[]): string {
  const names = new Help().boxWrap(environmentOf(groups).join(', '), 78);
  return `\nEnvironment (docs/configuration.md):\n${names.replace(/^/gm, '  ')}`;
}
