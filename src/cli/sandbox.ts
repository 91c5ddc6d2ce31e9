/**
 * `perks-worker sandbox`: runs the Perks API simulator until SIGINT or SIGTERM, and prints the
 * environment lines that point the worker at it.
 */
import { loadConfig } from '../config.js';
import { PortInUseError } from '../ops/health.js';
import { createLogger } from '../ops/logger.js';
import { loadScenario, type Scenario } from '../sandbox/scenario.js';
import { type SandboxOptions, sandboxApiEnv, startSandbox } from '../sandbox/server.js';
import {
  type CommandSpec,
  type ParsedArgs,
  parseCommandArgs,
  UsageError,
  wholeNumberOption,
} from './command.js';

const spec = {
  name: 'sandbox',
  config: ['log'],
  summary: 'Run the Perks API sandbox: a local simulator of the API, failures included.',
  options: {
    port: { type: 'string' },
    host: { type: 'string' },
    consumers: { type: 'string' },
    seed: { type: 'string' },
    'rewards-min': { type: 'string' },
    'rewards-max': { type: 'string' },
    'rewards-on-enroll': { type: 'string' },
    'latency-ms': { type: 'string' },
    'rate-limit': { type: 'string' },
    'token-ttl': { type: 'string' },
    scenario: { type: 'string' },
  },
  help: [
    '--port N                   port to listen on (default 4010; 0 picks a free one)',
    '--host HOST                interface to listen on (default 127.0.0.1)',
    '--consumers N              enrolled consumers to generate, sbx_0001... (default 50)',
    '--seed N                   seed of the generated data (default 1)',
    '--rewards-min N            fewest rewards per generated consumer (default 0)',
    '--rewards-max N            most rewards per generated consumer (default 30)',
    '--rewards-on-enroll N      rewards given to a consumer the API enrolls (default 3)',
    '--latency-ms N             delay added to every API response (default 0)',
    '--rate-limit N             requests per second per token before 429s (default none)',
    '--token-ttl N              lifetime of access tokens in seconds (default 3600)',
    '--scenario FILE            JSON file of extra consumers, settings and faults',
  ],
} satisfies CommandSpec;

export interface SandboxCommandIo {
  /** Stops the sandbox like SIGINT would (tests). */
  signal?: AbortSignal;
  /** Where the start-up lines go. Default process.stdout. */
  stdout?: NodeJS.WritableStream;
}

/** Rewards of a consumer enrolled through the API, unless --rewards-on-enroll says otherwise. */
const defaultRewardsOnEnroll = 3;

export async function run(argv: readonly string[], io: SandboxCommandIo = {}): Promise<number> {
  const stdout = io.stdout ?? process.stdout;
  const args = parseCommandArgs(spec, argv, stdout);
  if (!args) return 0;
  const { values } = args;
  const options = sandboxOptions(values);
  const scenario = values.scenario ? await readScenario(values.scenario) : undefined;
  const config = loadConfig(['log']);
  const logger = createLogger(config.log, { component: 'sandbox' });

  const sandbox = await startSandbox({ ...options, scenario, logger }).catch((error: unknown) => {
    if ((error as { code?: string }).code !== 'EADDRINUSE') throw error;
    throw new PortInUseError('--port', options.port ?? 0, 'give the sandbox a free --port');
  });
  const consumers = options.consumers ?? 0;
  stdout.write(
    [
      `Perks sandbox listening on ${sandbox.baseUrl} (${consumers} consumers, seed ${options.seed ?? 1})`,
      // The sandbox's own demo secret, not a real credential: printing it is the point.
      ...Object.entries(sandboxApiEnv(sandbox)).map(([name, value]) => `  ${name}=${value}`),
      '',
    ].join('\n'),
  );
  await stopRequested(io.signal);
  await sandbox.close();
  return 0;
}

type Values = ParsedArgs<typeof spec.options>['values'];

function sandboxOptions(values: Values): SandboxOptions {
  const options: SandboxOptions = {
    host: values.host ?? '127.0.0.1',
    port: wholeNumberOption(spec, values.port, '--port', 0, 65_535) ?? 4010,
    consumers: wholeNumberOption(spec, values.consumers, '--consumers', 0, 1_000_000) ?? 50,
    seed: wholeNumberOption(spec, values.seed, '--seed', 0, 2 ** 32 - 1) ?? 1,
    tokenTtlSeconds: wholeNumberOption(spec, values['token-ttl'], '--token-ttl', 1, 86_400) ?? 3600,
  };
  const min = wholeNumberOption(spec, values['rewards-min'], '--rewards-min', 0, 1_000_000) ?? 0;
  const max =
    wholeNumberOption(spec, values['rewards-max'], '--rewards-max', 0, 1_000_000) ??
    Math.max(30, min);
  if (max < min) {
    throw new UsageError(
      `sandbox: --rewards-max (${max}) must not be below --rewards-min (${min})`,
    );
  }
  options.rewardsPerConsumer = { min, max };
  const onEnroll = wholeNumberOption(
    spec,
    values['rewards-on-enroll'],
    '--rewards-on-enroll',
    0,
    100_000,
  );
  // A newcomer's own enrollments show data: each gets a few rewards unless told otherwise.
  options.rewardsOnEnroll = onEnroll ?? defaultRewardsOnEnroll;
  const latency = wholeNumberOption(spec, values['latency-ms'], '--latency-ms', 0, 600_000);
  if (latency !== undefined) options.latencyMs = latency;
  const rate = wholeNumberOption(spec, values['rate-limit'], '--rate-limit', 1, 1_000_000);
  if (rate !== undefined) options.rateLimitPerSecond = rate;
  return options;
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
