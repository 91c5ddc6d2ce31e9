import { loadConfig } from '../config.js';
import { createRuntime } from '../jobs/runtime.js';
import { registerReconcileSchedule } from '../jobs/schedule.js';
import { startWorker } from '../jobs/worker.js';
import { closeServer, startOpsServer } from '../ops/health.js';
import { createLogger } from '../ops/logger.js';
import { shutdownSignal } from '../ops/shutdown.js';
import { type CommandSpec, parseCommandArgs, usage } from './command.js';

const spec: CommandSpec = {
  name: 'work',
  summary:
    'Run the worker: enrollment, reward sync and reconciliation jobs, until SIGTERM or SIGINT.\nRun as many replicas as you like; they share the work through Redis.',
  options: { help: { type: 'boolean', short: 'h' } },
  help: [],
};

export async function run(argv: readonly string[]): Promise<number> {
  const { values } = parseCommandArgs(spec, argv);
  if (values.help) {
    process.stdout.write(`${usage(spec)}\n`);
    return 0;
  }
  const config = loadConfig(['perks', 'consumerIds', 'redis', 'database', 'worker', 'log']);
  const logger = createLogger(config.log, { pid: process.pid });
  const stopping = shutdownSignal();

  const runtime = createRuntime(config, logger);
  const worker = startWorker(
    runtime.ctx,
    runtime.connection,
    config.redis.queuePrefix,
    config.worker,
  );
  const server = await startOpsServer({
    port: config.worker.port,
    logger,
    checks: [
      { name: 'redis', check: async () => void (await runtime.connection.ping()) },
      { name: 'postgres', check: () => runtime.ctx.store.ping() },
    ],
  });
  registerReconcileSchedule(
    runtime.ctx.queues,
    runtime.connection,
    config.redis.queuePrefix,
    config.worker.reconcileCron,
    logger,
  ).catch((error: unknown) =>
    logger.error(
      { err: { message: String(error) } },
      'could not register the reconciliation schedule',
    ),
  );
  logger.info(
    {
      port: config.worker.port,
      prefix: config.redis.queuePrefix,
      enrollConcurrency: config.worker.enrollConcurrency,
      syncConcurrency: config.worker.syncConcurrency,
    },
    'worker started',
  );

  const signal = await stopping;
  logger.info(
    { signal, timeoutMs: config.worker.shutdownTimeoutMs },
    'shutting down: finishing active jobs',
  );
  const { timedOut } = await worker.close(config.worker.shutdownTimeoutMs);
  await closeServer(server);
  await runtime.close();
  logger.info({ timedOut }, 'worker stopped');
  return 0;
}
