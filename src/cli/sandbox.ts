/**
 * `perks-worker sandbox`: runs the Perks API simulator until SIGINT or SIGTERM, and prints the
 * environment lines that point the worker at it.
 */
import { loadConfig } from '../config.js';
import { UsageError } from '../errors.js';
import { PortInUseError } from '../ops/health.js';
import { createLogger } from '../ops/logger.js';
import { loadScenario, type Scenario } from '../sandbox/scenario.js';
import { sandboxApiEnv, startSandbox } from '../sandbox/server.js';

export interface SandboxCommandOptions {
  port: number;
  host: string;
  consumers: number;
  seed: number;
  rewardsMin: number;
  /** Default 30, or rewardsMin when higher. */
  rewardsMax?: number;
  rewardsOnEnroll: number;
  latencyMs?: number;
  rateLimit?: number;
  tokenTtl: number;
  scenario?: string;
}

export interface SandboxCommandIo {
  /** Stops the sandbox like SIGINT would (tests). */
  signal?: AbortSignal;
  /** Where the start-up lines go. Default process.stdout. */
  stdout?: NodeJS.WritableStream;
}

export async function run(
  options: SandboxCommandOptions,
  io: SandboxCommandIo = {},
): Promise<number> {
  const { rewardsMin: min, rewardsMax: max = Math.max(30, min) } = options;
  if (max < min) {
    throw new UsageError(
      `sandbox: --rewards-max (${max}) must not be below --rewards-min (${min})`,
    );
  }
  const scenario = options.scenario ? await readScenario(options.scenario) : undefined;
  const logger = createLogger(loadConfig(['log']).log, { component: 'sandbox' });
  const sandbox = await startSandbox({
    host: options.host,
    port: options.port,
    consumers: options.consumers,
    seed: options.seed,
    tokenTtlSeconds: options.tokenTtl,
    rewardsPerConsumer: { min, max },
    rewardsOnEnroll: options.rewardsOnEnroll,
    // Unset, the scenario's settings apply.
    latencyMs: options.latencyMs,
    rateLimitPerSecond: options.rateLimit,
    scenario,
    logger,
  }).catch((error: unknown) => {
    if ((error as { code?: string }).code !== 'EADDRINUSE') throw error;
    throw new PortInUseError('--port', options.port, 'give the sandbox a free --port');
  });
  (io.stdout ?? process.stdout).write(
    [
      `Perks sandbox listening on ${sandbox.baseUrl} (${options.consumers} consumers, seed ${options.seed})`,
      // The sandbox's own demo secret, not a real credential: printing it is the point.
      ...Object.entries(sandboxApiEnv(sandbox)).map(([name, value]) => `  ${name}=${value}`),
      '',
    ].join('\n'),
  );
  await stopRequested(io.signal);
  await sandbox.close();
  return 0;
}

async function readScenario(file: string): Promise<Scenario> {
  try {
    return await loadScenario(file);
  } catch (error) {
    throw new UsageError(`sandbox: --${(error as Error).message}`);
  }
}

/** Resolves on SIGINT, SIGTERM or the abort signal, then stops listening for them. */
function stopRequested(signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const stop = () => {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      signal?.removeEventListener('abort', stop);
      resolve();
    };
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
    if (signal?.aborted) stop();
    else signal?.addEventListener('abort', stop, { once: true });
  });
}
