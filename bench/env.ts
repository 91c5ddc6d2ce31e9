/**
 * What the benchmarks read from the environment, and the description of the machine they ran
 * on. The bench is a dev tool: this is its only reader of process.env, with plain defaults.
 */
import { readdirSync, readFileSync } from 'node:fs';
import os from 'node:os';
import type { Redis } from 'ioredis';
import type pg from 'pg';

export interface BenchEnvironment {
  redisUrl: string;
  /** A database the bench connects to in order to create (and drop) its own. */
  adminDatabaseUrl: string;
}

export function readBenchEnvironment(env: NodeJS.ProcessEnv = process.env): BenchEnvironment {
  return {
    redisUrl: env.REDIS_URL?.trim() || 'redis://127.0.0.1:6379',
    adminDatabaseUrl: env.DATABASE_URL?.trim() || 'postgres://postgres@127.0.0.1:5432/postgres',
  };
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
