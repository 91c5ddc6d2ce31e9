#!/usr/bin/env node
/**
 * The `perks-worker` command: runs the command line, and turns the errors a user can fix into
 * their lines on stderr and an exit status (see errors.ts).
 */
// First: `work` takes SIGHUP before the rest loads (hangups.ts).
import './cli/hangups.js';
import { createRequire } from 'node:module';
import { runCli } from './cli/program.js';
import { InputError, OperationalError } from './errors.js';

// A reader that stops early (`| head`, `| grep -q`) closes the pipe: the rest of the output has
// nowhere to go, which is no failure of the command; it ends with its own status.
process.stdout.on('error', (error: NodeJS.ErrnoException) => {
  if (error.code !== 'EPIPE') throw error;
});

const { version } = createRequire(import.meta.url)('../../package.json') as { version: string };

try {
  process.exitCode = await runCli(process.argv.slice(2), version);
} catch (error) {
  if (error instanceof InputError || error instanceof OperationalError) {
    for (const line of error.message.split('\n')) process.stderr.write(`perks-worker: ${line}\n`);
    process.exitCode = error instanceof InputError ? 2 : 1;
  } else {
    process.stderr.write(
      `perks-worker: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
    );
    process.exitCode = 1;
  }
}
