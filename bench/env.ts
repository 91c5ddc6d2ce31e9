/**
 * What the benchmarks read from the environment, and the description of the machine they ran
 * on. The bench is a dev tool: this is its only reader of process.env, with plain defaults.
 */
import { readdirSync, readFileSync } from 'node:fs';
import os from 'node:os';
import type { Redis } from 'ioredis';
import type pg from 'pg';
import { variables } from '../src/config.js';
import { type RewardEventType, rewardEventTypes } from '../src/store/types.js';

export interface BenchEnvironment {
  redisUrl: string;
  /** A database the bench connects to in order to create (and drop) its own. */
  adminDatabaseUrl: string;
  /**
   * The reward events the worker and the bare loop record: BENCH_EVENT_TYPES, read as
   * EVENT_TYPES (`none` or a comma list); default all four, as EVENT_TYPES.
   */
  eventTypes: RewardEventType[];
  /**
   * BENCH_WORKER_ENV (`NAME=value,NAME=value`): the worker's variables over every lab's own, to
   * run the same scenarios with other settings (`SYNC_CONCURRENCY=8`). The bare loops keep
   * the defaults.
   */
  workerEnv: Record<string, string>;
}

export function readBenchEnvironment(env: NodeJS.ProcessEnv = process.env): BenchEnvironment {
  return {
    redisUrl: env.REDIS_URL?.trim() || 'redis://127.0.0.1:6379',
    adminDatabaseUrl: env.DATABASE_URL?.trim() || 'postgres://postgres@127.0.0.1:5432/postgres',
    eventTypes: benchEventTypes(env.BENCH_EVENT_TYPES?.trim() || rewardEventTypes.join(',')),
    workerEnv: benchWorkerEnv(env.BENCH_WORKER_ENV?.trim() ?? ''),
  };
}

function benchWorkerEnv(value: string): Record<string, string> {
  const pairs = value.split(',').filter((item) => item.trim() !== '');
  return Object.fromEntries(
    pairs.map((item) => {
      const [name = '', ...rest] = item.trim().split('=');
      if (!Object.hasOwn(variables, name) || rest.length === 0) {
        throw new Error(
          `BENCH_WORKER_ENV is invalid: ${JSON.stringify(item)} is not NAME=value with NAME one of the worker's variables`,
        );
      }
      return [name, rest.join('=')];
    }),
  );
}

function benchEventTypes(value: string): RewardEventType[] {
  const parsed = variables.EVENT_TYPES.schema.safeParse(value);
  if (parsed.success) return parsed.data;
  const message = parsed.error.issues[0]?.message ?? 'bad value';
  throw new Error(`BENCH_EVENT_TYPES is invalid: ${message}, got ${JSON.stringify(value)}`);
}

export interface MachineDescription {
  cpu: string;
  cores: number;
  memoryGiB: number;
  os: string;
  node: string;
  redis: string;
  postgres: string;
  /** 1-minute load average when the run started: above ~0.5 the machine was not idle. */
  loadAtStart: number;
  /** vitest processes of other engineers seen when the run started (same cores). */
  otherTestProcesses: number;
}

export async function describeMachine(admin: pg.Pool, redis: Redis): Promise<MachineDescription> {
  const info = await redis.info('server');
  const { rows } = await admin.query<{ server_version: string }>('show server_version');
  return {
    cpu: cpuModel(),
    cores: os.cpus().length,
    memoryGiB: Math.round((os.totalmem() / 1024 ** 3) * 10) / 10,
    os: `${os.type()} ${os.release()}`,
    node: process.version,
    redis: /redis_version:(\S+)/.exec(info)?.[1] ?? 'unknown',
    postgres: rows[0]?.server_version ?? 'unknown',
    loadAtStart: Math.round((os.loadavg()[0] ?? 0) * 100) / 100,
    otherTestProcesses: countProcesses(/vitest/),
  };
}

/** The machine's CPU time so far (Linux /proc/stat, in clock ticks): all of it, idle, steal. */
export interface CpuTimes {
  total: number;
  /** idle and iowait */
  idle: number;
  steal: number;
}

/** Undefined where /proc/stat is absent or has no steal column. */
export function cpuTimes(): CpuTimes | undefined {
  try {
    const line = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0] ?? '';
    const ticks = line.trim().split(/\s+/).slice(1).map(Number);
    // user nice system idle iowait irq softirq steal [guest guest_nice: already in user, nice]
    const steal = ticks[7];
    if (steal === undefined || ticks.slice(0, 8).some((t) => !Number.isFinite(t))) return undefined;
    const total = ticks.slice(0, 8).reduce((sum, t) => sum + t, 0);
    return { total, idle: (ticks[3] ?? 0) + (ticks[4] ?? 0), steal };
  } catch {
    return undefined;
  }
}

/**
 * The share of the cores' time the hypervisor gave to other machines since `before` (CPU
 * steal), in percent: time the bench's processes could have run and did not. Undefined where
 * it cannot be read.
 */
export function stealSince(before: CpuTimes | undefined): number | undefined {
  const now = cpuTimes();
  if (!before || !now || now.total <= before.total) return undefined;
  return Math.round((1000 * (now.steal - before.steal)) / (now.total - before.total)) / 10;
}

/**
 * CPU seconds the machine ran outside this process since `before` (Linux clock ticks are 1/100
 * s): PostgreSQL's, for a write loop run from here. Undefined where /proc/stat is unreadable.
 */
export function cpuElsewhereSince(before: {
  machine: CpuTimes | undefined;
  own: NodeJS.CpuUsage;
}): number | undefined {
  const now = cpuTimes();
  if (!before.machine || !now) return undefined;
  const busy = (t: CpuTimes) => t.total - t.idle - t.steal;
  const own = process.cpuUsage(before.own);
  return (busy(now) - busy(before.machine)) / 100 - (own.user + own.system) / 1e6;
}

function cpuModel(): string {
  try {
    const text = readFileSync('/proc/cpuinfo', 'utf8');
    return /^model name\s*:\s*(.+)$/m.exec(text)?.[1]?.trim() ?? os.cpus()[0]?.model ?? 'unknown';
  } catch {
    return os.cpus()[0]?.model ?? 'unknown';
  }
}

/** Processes whose command line matches (Linux /proc); 0 where /proc is absent. */
function countProcesses(pattern: RegExp): number {
  let count = 0;
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return 0;
  }
  for (const entry of entries) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      const cmd = readFileSync(`/proc/${entry}/cmdline`, 'utf8').replaceAll('\0', ' ');
      if (pattern.test(cmd)) count += 1;
    } catch {
      // The process ended while we looked.
    }
  }
  return count;
}
