/**
 * `perks-worker work`: enrollment, reward sync and reconciliation jobs, and the signup intake
 * (HTTP, outbox table, RabbitMQ) that is configured, until SIGTERM or SIGINT. Replicas share
 * the work through Redis.
 */
import { startPerksWorker } from '../app.js';
import { configGroups, loadConfig } from '../config.js';
import { createLogger } from '../ops/logger.js';
import { shutdownSignal } from '../ops/shutdown.js';
import { type CommandSpec, parseCommandArgs } from './command.js';

export interface WorkOptions {
  /** Do not apply migrations at start (when a deploy step runs `migrate`). */
  skipMigrate?: boolean;
}

export async function run(given: WorkOptions | readonly string[]): Promise<number> {
  const options = isArgv(given) ? fromArgv(given) : given;
  if (!options) return 0;
  const config = loadConfig(configGroups);
  const logger = createLogger(config.log, { pid: process.pid });
  const stopping = shutdownSignal();
  const app = await startPerksWorker(config, {
    logger,
    stopping,
    ...(options.skipMigrate ? { skipMigrate: true } : {}),
  });
  const signal = await stopping;
  logger.info(
    { signal, timeoutMs: config.worker.shutdownTimeoutMs },
    'shutting down: finishing active jobs',
  );
  const { timedOut } = await app.close();
  logger.info({ timedOut }, 'worker stopped');
  // Everything is closed; a reconnecting socket left behind (Redis still down) must not keep
  // the process alive. The timer is unref'd: a clean exit never waits for it.
  setTimeout(() => process.exit(0), 2000).unref();
  return 0;
}

// TRANSITIONAL, delete at integration: today's index.ts passes argv; commander passes options.
const isArgv = (given: object): given is readonly string[] => Array.isArray(given);
function fromArgv(argv: readonly string[]): WorkOptions | undefined {
  const spec = {
    name: 'work',
    config: configGroups,
    summary: 'Run the worker until SIGTERM or SIGINT.',
    options: { 'skip-migrate': { type: 'boolean' } },
    help: ['--skip-migrate         do not apply migrations at start'],
  } satisfies CommandSpec;
  const args = parseCommandArgs(spec, argv);
  return args && { skipMigrate: args.values['skip-migrate'] === true };
}
