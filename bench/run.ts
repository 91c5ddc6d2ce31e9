/**
 * `npm run bench [-- --quick] [-- --scenario 1,3]`: runs the scenarios against the sandbox,
 * real Redis and real Postgres, prints each scenario's inputs, figures and ratio, a summary
 * table, and ends with one line of JSON holding every ratio. Every ratio compares two things
 * measured in the same run.
 */
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import {
  type BenchEnvironment,
  cpuTimes,
  describeMachine,
  readBenchEnvironment,
  stealSince,
} from './env.js';
import { openBenchRun } from './lab.js';
import {
  formatFailure,
  formatScenario,
  ratiosJson,
  type ScenarioFailure,
  textTable,
} from './report.js';
import type { BenchContext, Scenario, ScenarioResult } from './scenario.js';
import { scenario1 } from './scenario-1-first-sync.js';
import { scenario2 } from './scenario-2-latency.js';
import { scenario3 } from './scenario-3-resync.js';
import { scenario4 } from './scenario-4-enrollment.js';
import { scenario5 } from './scenario-5-fanout.js';
import { scenario6 } from './scenario-6-baseline.js';
import { scenario7 } from './scenario-7-enroll-file.js';
import { scenario8 } from './scenario-8-concurrency.js';

const scenarios: readonly Scenario[] = [
  scenario1,
  scenario2,
  scenario3,
  scenario4,
  scenario5,
  scenario6,
  scenario7,
  scenario8,
];

const usage = `Usage: npm run bench -- [--quick] [--scenario N[,N...]]... [--fanout N]

Runs the perks-worker benchmarks against the sandbox, Redis (REDIS_URL, default
redis://127.0.0.1:6379) and PostgreSQL (DATABASE_URL: an admin connection, default
postgres://postgres@127.0.0.1:5432/postgres; the bench creates and drops perks_bench_<pid>).

  --quick            smaller sizes (the whole run takes under two minutes)
  --scenario N       run only these scenarios (repeatable, or a comma list); default all:
${scenarios.map((s) => `                       ${s.id}  ${s.title}`).join('\n')}
  --fanout N         consumers of scenario 5 (default 1,000,000; quick 12,000); it also
                     runs N/10 (up to 32,000: 4,000 jobs of 8; and N/3) to compare
  -h, --help         this help

BENCH_EVENT_TYPES (read as EVENT_TYPES) sets the reward events recorded; BENCH_WORKER_ENV
(NAME=value,NAME=value) sets the worker's variables over the scenarios' own.

The last line printed is one JSON object: {"scenario1": ratio, ...}.`;

export class BenchUsageError extends Error {
  override readonly name = 'BenchUsageError';
}

export interface BenchOptions {
  quick: boolean;
  scenarios: number[];
  help: boolean;
  fanout: number | undefined;
}

/** The worker settings a run changed (BENCH_WORKER_ENV), for its first line. */
const workerEnvNote = (env: Record<string, string>) => {
  const set = Object.entries(env).map(([name, value]) => `${name}=${value}`);
  return set.length === 0 ? '' : `; worker settings: ${set.join(', ')}`;
};

export function parseBenchArgs(argv: readonly string[]): BenchOptions {
  let parsed: ReturnType<typeof parse>;
  try {
    parsed = parse(argv);
  } catch (error) {
    throw new BenchUsageError((error as Error).message.split('\n')[0] ?? 'bad arguments');
  }
  const ids = (parsed.values.scenario ?? []).flatMap((value) => value.split(','));
  const chosen = new Set<number>();
  for (const raw of ids) {
    const id = Number(raw.trim());
    if (!scenarios.some((s) => s.id === id)) {
      throw new BenchUsageError(
        `--scenario must be 1 to ${scenarios.length}, got ${JSON.stringify(raw)}`,
      );
    }
    chosen.add(id);
  }
  const fanoutRaw = parsed.values.fanout;
  const fanout = fanoutRaw === undefined ? undefined : Number(fanoutRaw);
  if (fanout !== undefined && (!Number.isInteger(fanout) || fanout < 10 || fanout > 10_000_000)) {
    throw new BenchUsageError(
      `--fanout must be a whole number from 10 to 10000000, got ${JSON.stringify(fanoutRaw)}`,
    );
  }
  return {
    fanout,
    quick: parsed.values.quick ?? false,
    scenarios: chosen.size > 0 ? [...chosen].sort((a, b) => a - b) : scenarios.map((s) => s.id),
    help: parsed.values.help ?? false,
  };
}

function parse(argv: readonly string[]) {
  return parseArgs({
    args: [...argv],
    strict: true,
    allowPositionals: false,
    options: {
      quick: { type: 'boolean' },
      scenario: { type: 'string', multiple: true },
      fanout: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
}

async function main(argv: readonly string[]): Promise<number> {
  let options: BenchOptions;
  try {
    options = parseBenchArgs(argv);
  } catch (error) {
    if (!(error instanceof BenchUsageError)) throw error;
    process.stderr.write(`bench: ${error.message} (see --help)\n`);
    return 2;
  }
  if (options.help) {
    process.stdout.write(`${usage}\n`);
    return 0;
  }
  let env: BenchEnvironment;
  try {
    env = readBenchEnvironment();
  } catch (error) {
    process.stderr.write(`bench: ${(error as Error).message}\n`);
    return 2;
  }
  const clock = performance.now();
  const cpuAtStart = cpuTimes();
  const run = await openBenchRun(env);
  const results: ScenarioResult[] = [];
  const failures: ScenarioFailure[] = [];
  let interrupted = false;
  const onSignal = () => {
    interrupted = true;
    process.stderr.write('bench: interrupted; cleaning up after the current scenario\n');
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    const machine = await describeMachine(run.admin, run.redis);
    const mode = options.quick ? 'quick' : 'full';
    process.stdout.write(
      `perks-worker bench (${mode}) on ${machine.cpu}, ${machine.cores} cores, Node ${machine.node}, Redis ${machine.redis}, PostgreSQL ${machine.postgres}; load ${machine.loadAtStart}, ${machine.otherTestProcesses} other vitest processes; reward events: ${run.env.eventTypes.join(',') || 'none'}${workerEnvNote(run.env.workerEnv)}\n\n`,
    );
    const ctx: BenchContext = {
      run,
      quick: options.quick,
      fanout: options.fanout,
      note: (message) => process.stderr.write(`${message}\n`),
    };
    for (const id of options.scenarios) {
      if (interrupted) break;
      const scenario = scenarios.find((s) => s.id === id);
      if (!scenario) continue;
      ctx.note(`scenario ${id}: ${scenario.title}...`);
      const before = cpuTimes();
      let result: ScenarioResult;
      try {
        result = await scenario.run(ctx);
      } catch (error) {
        // One scenario's failure (a stalled database under CPU steal, say) need not cost the
        // others' figures: it is reported, the run goes on and exits non-zero.
        const failure: ScenarioFailure = {
          id,
          title: scenario.title,
          message: error instanceof Error ? error.message : String(error),
        };
        failures.push(failure);
        if (error instanceof Error && error.stack) ctx.note(error.stack);
        process.stdout.write(`${formatFailure(failure)}\n\n`);
        continue;
      }
      const steal = stealSince(before);
      if (steal !== undefined) result.stealPercent = steal;
      results.push(result);
      process.stdout.write(`${formatScenario(result)}\n\n`);
    }
    const durationS = Math.round((performance.now() - clock) / 1000);
    const runSteal = stealSince(cpuAtStart);
    process.stdout.write(`${textTable(results)}\n\n`);
    if (runSteal !== undefined) process.stdout.write(`CPU steal over the run: ${runSteal}%\n\n`);
    for (const failure of failures) process.stdout.write(`${formatFailure(failure)}\n`);
    if (failures.length > 0) process.stdout.write('\n');
    process.stdout.write(`bench took ${durationS} s\n`);
  } finally {
    await run.close();
  }
  process.stdout.write(`${JSON.stringify(ratiosJson(results))}\n`);
  return interrupted ? 130 : failures.length > 0 ? 1 : 0;
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    process.stderr.write(
      `bench: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
    );
    process.exitCode = 1;
  },
);
