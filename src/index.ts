#!/usr/bin/env node
import { createRequire } from 'node:module';
import { distance } from 'fastest-levenshtein';
import { UsageError } from './cli/command.js';
/**
 * The `perks-worker` command: parses argv, dispatches to one command module, and turns the
 * errors a user can fix (bad arguments, bad environment) into one line and a non-zero exit.
 */
import { ConfigError } from './config.js';

interface CommandModule {
  run(argv: readonly string[]): Promise<number>;
}

/** Summaries live here so that `--help` loads no command module. */
const commands: Record<string, { summary: string; load: () => Promise<CommandModule> }> = {
  work: {
    summary: 'run the worker (enrollment, reward sync, reconciliation)',
    load: () => import('./cli/work.js'),
  },
  check: {
    summary: 'check the configuration, Redis, PostgreSQL, the API and the edges before running',
    load: () => import('./cli/check.js'),
  },
  migrate: {
    summary: 'create the database if needed and apply migrations',
    load: () => import('./cli/migrate.js'),
  },
  enroll: {
    summary: 'enqueue the enrollment of one customer, or of many from a CSV or JSON Lines file',
    load: () => import('./cli/enroll.js'),
  },
  sync: {
    summary: 'enqueue a reward sync of one consumer',
    load: () => import('./cli/sync.js'),
  },
  reconcile: {
    summary: 'start a reconciliation of every enrolled consumer now',
    load: () => import('./cli/reconcile.js'),
  },
  status: {
    summary: 'show queue counts, the last reconciliation and failures',
    load: () => import('./cli/status.js'),
  },
  failed: {
    summary: 'list failed jobs, or retry them with --retry',
    load: () => import('./cli/failed.js'),
  },
  events: {
    summary: 'list reward events and their webhook delivery, or replay them',
    load: () => import('./cli/events.js'),
  },
  sandbox: {
    summary: 'run the Perks API sandbox (simulator)',
    load: () => import('./cli/sandbox.js'),
  },
  demo: {
    summary: 'run the whole job against an in-process sandbox and show the result',
    load: () => import('./cli/demo.js'),
  },
};

function topLevelHelp(): string {
  const width = Math.max(...Object.keys(commands).map((n) => n.length)) + 2;
  const rows = Object.entries(commands).map(([name, c]) => `  ${name.padEnd(width)}${c.summary}`);
  return [
    'Usage: perks-worker <command> [options]',
    '',
    'Commands:',
    ...rows,
    '',
    "Run 'perks-worker help <command>' (or '<command> --help') for a command's options and the",
    'environment variables it reads. --version prints the version.',
    'Configuration comes from environment variables: see the README.',
  ].join('\n');
}

/** Failures of the environment (a server down, a migration edited): one line, no stack. */
const operationalErrors = new Set([
  'DatabaseUnreachableError',
  'MigrationChecksumError',
  'MigrationFileError',
  'PortInUseError',
  'ReconciliationGoneError',
  'RedisUnreachableError',
]);

/** Bad input caught below the argument parser (a payload, a user id needing the key). */
const inputErrors = new Set(['InvalidPayloadError', 'ConsumerIdKeyMissingError']);

async function main(argv: readonly string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === '--version' || name === '-V') {
    process.stdout.write(`perks-worker ${version()}\n`);
    return 0;
  }
  if (name === '--help' || name === '-h' || (name === 'help' && rest.length === 0)) {
    process.stdout.write(`${topLevelHelp()}\n`);
    return 0;
  }
  if (name === undefined) {
    process.stderr.write(`${topLevelHelp()}\n`);
    return 2;
  }
  // `help <command>` is `<command> --help`.
  const [commandName, commandArgs] = name === 'help' ? [rest[0] ?? '', ['--help']] : [name, rest];
  const command = commands[commandName];
  if (!command) throw new UsageError(unknownCommand(commandName));
  const module = await command.load();
  return module.run(commandArgs);
}

function unknownCommand(name: string): string {
  const nearest = Object.keys(commands)
    .map((candidate) => ({ candidate, distance: distance(name, candidate) }))
    .sort((a, b) => a.distance - b.distance)[0];
  const hint =
    nearest && nearest.distance <= Math.max(2, Math.floor(name.length / 3))
      ? `did you mean '${nearest.candidate}'? `
      : '';
  return `unknown command ${JSON.stringify(name)}; ${hint}run 'perks-worker --help'`;
}

function version(): string {
  const pkg = createRequire(import.meta.url)('../../package.json') as { version: string };
  return pkg.version;
}

// A reader that stops early (`| head`, `| grep -q`) closes the pipe: the rest of the output has
// nowhere to go, which is no failure of the command; it ends with its own status.
process.stdout.on('error', (error: NodeJS.ErrnoException) => {
  if (error.code !== 'EPIPE') throw error;
});

try {
  process.exitCode = await main(process.argv.slice(2));
} catch (error) {
  if (error instanceof ConfigError) {
    for (const line of error.message.split('\n')) process.stderr.write(`perks-worker: ${line}\n`);
    process.exitCode = 2;
  } else if (
    error instanceof UsageError ||
    (error instanceof Error && inputErrors.has(error.name))
  ) {
    process.stderr.write(`perks-worker: ${error.message}\n`);
    process.exitCode = 2;
  } else if (error instanceof Error && operationalErrors.has(error.name)) {
    process.stderr.write(`perks-worker: ${error.message}\n`);
    process.exitCode = 1;
  } else {
    // Unexpected: keep the stack, it is a bug report.
    process.stderr.write(
      `perks-worker: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
    );
    process.exitCode = 1;
  }
}
