/**
 * Scenario 7: bulk enrollment from a file. `perks-worker enroll --file` (the built bin, a
 * process of its own, as a user runs it) reads a CSV of N lines, checks each record, derives its
 * consumer id and enqueues it with the single enrollment's deduplication; no worker runs. The
 * issue's goal: 100,000 lines in under 60 s.
 *
 * Also measured: the same command again on the same file (every enrollment already pending,
 * nothing added: a rerun after an interruption), and the floor, the same jobs through
 * `enqueueEnrollments` in-process with nothing to read or check.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { checkSignup } from '../src/intake/signups.js';
import type { EnrollmentPayload } from '../src/queues/payloads.js';
import { enqueueEnrollments } from '../src/queues/producer.js';
import { closeQueues, defaultJobPolicy, openQueues } from '../src/queues/queues.js';
import { deletePrefix } from '../src/redis/connection.js';
import type { BenchRun } from './lab.js';
import {
  type BenchContext,
  perSecond,
  round,
  type Scenario,
  type ScenarioResult,
} from './scenario.js';

const entry = fileURLToPath(new URL('../src/index.js', import.meta.url));
const goalMs = 60_000;
const batch = 1000;

const userIdOf = (i: number) => `b7_${String(i).padStart(7, '0')}`;

function writeCsv(dir: string, lines: number): string {
  const path = join(dir, 'signups.csv');
  const rows = ['user_id,extra_consents,removed_consents'];
  for (let i = 0; i < lines; i++) rows.push(`${userIdOf(i)},TARGETING;STATISTICS,WEB_ANALYTICS`);
  writeFileSync(path, `${rows.join('\n')}\n`);
  return path;
}

/** Runs `enroll --file` to its end; its wall time from spawn to exit, and its stdout. */
function enrollFile(
  run: BenchRun,
  prefix: string,
  path: string,
): Promise<{ ms: number; stdout: string }> {
  const started = performance.now();
  const child = spawn(process.execPath, [entry, 'enroll', '--file', path], {
    env: { PATH: process.env.PATH, REDIS_URL: run.env.redisUrl, QUEUE_PREFIX: prefix },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-2000)));
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code) => {
      const ms = performance.now() - started;
      if (code === 0) resolve({ ms, stdout });
      else reject(new Error(`enroll --file exited ${code}: ${stderr}`));
    });
  });
}

async function waitingJobs(redis: Redis, prefix: string): Promise<number> {
  return redis.llen(`${prefix}:enrollment:wait`);
}

/** The floor: the same jobs, already checked, `batch` to an `addBulk`, in this process. */
async function bareEnqueue(run: BenchRun, prefix: string, lines: number): Promise<number> {
  const enrollments: EnrollmentPayload[] = [];
  for (let i = 0; i < lines; i++) {
    const checked = checkSignup(
      {
        user_id: userIdOf(i),
        extra_consents: ['TARGETING', 'STATISTICS'],
        removed_consents: ['WEB_ANALYTICS'],
      },
      undefined,
    );
    if (checked.ok) enrollments.push(checked.value);
  }
  const connection = new Redis(run.env.redisUrl, { maxRetriesPerRequest: null });
  const queues = openQueues(connection, prefix, defaultJobPolicy);
  try {
    const started = performance.now();
    for (let i = 0; i < enrollments.length; i += batch) {
      await enqueueEnrollments(queues, enrollments.slice(i, i + batch));
    }
    return performance.now() - started;
  } finally {
    await closeQueues(queues);
    connection.disconnect();
  }
}

export const scenario7: Scenario = {
  id: 7,
  title: 'Bulk enrollment from a file (enroll --file)',
  async run(ctx: BenchContext): Promise<ScenarioResult> {
    const lines = ctx.quick ? 10_000 : 100_000;
    const dir = mkdtempSync(join(tmpdir(), 'perks-bench-s7-'));
    const prefix = `perks_bench_${process.pid}_s7`;
    const barePrefix = `${prefix}_bare`;
    try {
      await deletePrefix(ctx.run.redis, prefix);
      await deletePrefix(ctx.run.redis, barePrefix);
      const path = writeCsv(dir, lines);
      ctx.note(`  enroll --file of ${lines} lines...`);
      const first = await enrollFile(ctx.run, prefix, path);
      const queued = await waitingJobs(ctx.run.redis, prefix);
      if (queued !== lines || !first.stdout.includes(`enqueued ${lines},`)) {
        throw new Error(`expected ${lines} jobs, found ${queued}; enroll said ${first.stdout}`);
      }
      ctx.note('  the same file again (all pending)...');
      const rerun = await enrollFile(ctx.run, prefix, path);
      if ((await waitingJobs(ctx.run.redis, prefix)) !== lines) {
        throw new Error(`the rerun added jobs: ${rerun.stdout}`);
      }
      ctx.note('  the floor: addBulk in-process...');
      const bareMs = await bareEnqueue(ctx.run, barePrefix, lines);
      const goal = Math.round((goalMs * lines) / 100_000);
      return {
        id: 7,
        title: this.title,
        inputs: { lines, 'jobs per addBulk': batch, 'goal ms': goal },
        figures: {
          'wall ms': Math.round(first.ms),
          'lines/s': perSecond(lines, first.ms),
          'rerun wall ms (all pending)': Math.round(rerun.ms),
          'floor ms (addBulk in-process)': Math.round(bareMs),
          'wall ÷ floor': round(first.ms / bareMs, 2),
        },
        ratio: round(first.ms / goal),
        goal: '≤ 1 (of 60 s per 100,000 lines)',
      };
    } finally {
      rmSync(dir, { recursive: true, force: true });
      await deletePrefix(ctx.run.redis, prefix);
      await deletePrefix(ctx.run.redis, barePrefix);
    }
  },
};
