/** `perks-worker sandbox`: the Perks API simulator until SIGINT or SIGTERM. */
import { once } from 'node:events';
import { loadConfig } from '../config.js';
import { UsageError } from '../errors.js';
import { listenFailure, PortInUseError } from '../ops/health.js';
import { createLogger } from '../ops/logger.js';
import { loadScenario } from '../sandbox/scenario.js';
import { sandboxApiEnv, startSandbox } from '../sandbox/server.js';

/** Commander's options (program.ts gives the defaults); rewardsMax defaults to 30 or rewardsMin. */
export interface SandboxCommandOptions {
  port: number;
  host: string;
  consumers: number;
  seed: number;
  rewardsMin: number;
  rewardsMax?: number;
  rewardsOnEnroll: number;
  latencyMs?: number;
  rateLimit?: number;
  tokenTtl: number;
  scenario?: string;
}

/** `signal` stops the sandbox as SIGINT would, `stdout` takes the start-up lines (tests). */
export async function run(
  options: SandboxCommandOptions,
  io: { signal?: AbortSignal; stdout?: NodeJS.WritableStream } = {},
): Promise<number> {
  const { rewardsMin: min, rewardsMax: max = Math.max(30, min), tokenTtl, rateLimit } = options;
  if (max < min) {
    throw new UsageError(
      `sandbox: --rewards-max (${max}) must not be below --rewards-min (${min})`,
    );
  }
  const scenario = options.scenario
    ? await loadScenario(options.scenario).catch((error: unknown) => {
        throw new UsageError(`sandbox: --${(error as Error).message}`);
      })
    : undefined;
  // latencyMs and rateLimit unset: the scenario's settings apply.
  const sandbox = await startSandbox({
    ...options,
    tokenTtlSeconds: tokenTtl,
    rewardsPerConsumer: { min, max },
    rateLimitPerSecond: rateLimit,
    scenario,
    logger: createLogger(loadConfig(['log']).log, { component: 'sandbox' }),
  }).catch((error: unknown) => {
    if ((error as { code?: string }).code === 'EADDRINUSE') {
      throw new PortInUseError('--port', options.port, 'give the sandbox a free --port');
    }
    const at = { portVariable: '--port', port: options.port, hostVariable: '--host' };
    throw listenFailure(error, { ...at, host: options.host }) ?? error;
  });
  (io.stdout ?? process.stdout).write(
    [
      `Perks sandbox listening on ${sandbox.baseUrl} (${options.consumers} consumers, seed ${options.seed})`,
      // The sandbox's own demo secret, not a real credential: printing it is the point.
      ...Object.entries(sandboxApiEnv(sandbox)).map(([name, value]) => `  ${name}=${value}`),
      '',
    ].join('\n'),
  );
  // Until SIGINT, SIGTERM or `io.signal`; the listeners then go.
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  process.once('SIGINT', onSignal).once('SIGTERM', onSignal);
  const stopped = AbortSignal.any([stop.signal, ...(io.signal ? [io.signal] : [])]);
  if (!stopped.aborted) await once(stopped, 'abort');
  process.off('SIGINT', onSignal).off('SIGTERM', onSignal);
  await sandbox.close();
  return 0;
}
