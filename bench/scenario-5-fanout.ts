/**
 * Scenario 5: reconciliation fan-out. N consumers are inserted with generate_series; the
 * sandbox (autoEnroll) answers each with an empty page. The worker runs as its own process
 * (`node dist/src/index.js work`; default settings in a full run, a smaller queue bound in a
 * quick one) so that its peak RSS (VmHWM) is its own. Sampled every 100 ms: its RSS, Redis
 * used_memory (the whole server: other users of this Redis count too) and the jobs of our sync
 * queue. Run at N/10 (up to 4,000 jobs of consumers, and N/3) and N: memory must stay flat as N
 * grows. The mean RSS of each run's second half tells a worker that grows from one whose rare
 * spikes a run ten times longer is likelier to catch, which the peak alone cannot.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { fanOutConsumersPerJob } from '../src/jobs/sync-rewards-batch.js';
import { startReconciliation } from '../src/queues/producer.js';
import { closeQueues, defaultJobPolicy, openQueues } from '../src/queues/queues.js';
import { deletePrefix } from '../src/redis/connection.js';
import { sandboxApiEnv, startSandbox } from '../src/sandbox/index.js';
import { type BenchRun, createSchema, defaultWorker, dropSchema } from './lab.js';
import { type BenchContext, round, type Scenario, type ScenarioResult } from './scenario.js';

const entry = fileURLToPath(new URL('../src/index.js', import.meta.url));

interface FanOut {
  consumers: number;
  fanOutMs: number;
  drainMs: number;
  peakRssMiB: number;
  /** Mean of the RSS samples of the run's second half: what the worker holds once steady. */
  steadyRssMiB: number;
  redisPeakDeltaMiB: number;
  peakJobs: number;
}

function procStatusKiB(pid: number, field: 'VmHWM' | 'VmRSS'): number {
  try {
    const text = readFileSync(`/proc/${pid}/status`, 'utf8');
    return Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? 0);
  } catch {
    return 0;
  }
}

async function usedMemory(redis: Redis): Promise<number> {
  const info = await redis.info('memory');
  return Number(/used_memory:(\d+)/.exec(info)?.[1] ?? 0);
}

/**
 * The fan-out's knobs: the defaults in a full run. A quick run (12,000 after 4,000) bounds the
 * queue at a fifth of the default, so that it fills well past the bound in both runs.
 */
interface Knobs {
  reconcileBatchSize: number;
  reconcileMaxPending: number;
  keepCompletedJobs: number;
}

const knobsOf = (quick: boolean): Knobs =>
  quick
    ? { reconcileBatchSize: 100, reconcileMaxPending: 400, keepCompletedJobs: 200 }
    : {
        reconcileBatchSize: defaultWorker.reconcileBatchSize,
        reconcileMaxPending: defaultWorker.reconcileMaxPending,
        keepCompletedJobs: defaultJobPolicy.keepCompletedJobs,
      };

/** Consumers per sync job: the spawned worker runs with the defaults. */
const perJob = fanOutConsumersPerJob(defaultWorker);

/**
 * Jobs of the sync queue can reach at most this (see the reconciliation's comment): the
 * pending bound, one read batch's jobs, the completed jobs kept and those running.
 */
const jobBound = (knobs: Knobs) =>
  knobs.reconcileMaxPending +
  Math.ceil(knobs.reconcileBatchSize / perJob) +
  knobs.keepCompletedJobs +
  defaultWorker.syncConcurrency;

/**
 * N/10, but up to 4,000 jobs' worth of consumers (and N/3 at most). Below the job bound
 * (3,071 with the defaults) the queue never fills; and the worker's heap still grows over its
 * first few thousand jobs (with one consumer a job, peak RSS 145 MiB after 2,000 and 164 after
 * 4,000, levelling at 184 to 190 from 10,000 on): a smaller run would compare N against a
 * worker not yet in its steady state.
 */
const smallerRun = (large: number) =>
  Math.max(Math.round(large / 10), Math.min(4000 * perJob, Math.round(large / 3)));

function exited(child: ChildProcess): Promise<number | null> {
  return new Promise((resolve) => {
    if (child.exitCode !== null) resolve(child.exitCode);
    else child.once('exit', (code) => resolve(code));
  });
}

async function fanOut(
  ctx: BenchContext,
  run: BenchRun,
  consumers: number,
  name: string,
  knobs: Knobs,
): Promise<FanOut> {
  const schema = `bench_${name}`;
  const prefix = `perks_bench_${process.pid}_${name}`;
  await createSchema(run, schema);
  await deletePrefix(run.redis, prefix);
  await run.pool.query(
    `insert into ${schema}.consumers (consumer_id, enrolled_at)
     select 'c' || lpad(g::text, 8, '0'), now() from generate_series(1, $1::int) g`,
    [consumers],
  );
  await run.pool.query(`vacuum analyze ${schema}.consumers`);
  const sandbox = await startSandbox({ autoEnroll: true });
  const connection = new Redis(run.env.redisUrl, { maxRetriesPerRequest: null });
  const queues = openQueues(connection, prefix, defaultJobPolicy);
  let stderr = '';
  const child = spawn(process.execPath, [entry, 'work', '--skip-migrate'], {
    env: {
      PATH: process.env.PATH,
      ...sandboxApiEnv(sandbox),
      REDIS_URL: run.env.redisUrl,
      QUEUE_PREFIX: prefix,
      DATABASE_URL: run.databaseUrl,
      DATABASE_SCHEMA: schema,
      PORT: '0',
      LOG_LEVEL: 'info',
      RECONCILE_BATCH_SIZE: String(knobs.reconcileBatchSize),
      RECONCILE_MAX_PENDING: String(knobs.reconcileMaxPending),
      KEEP_COMPLETED_JOBS: String(knobs.keepCompletedJobs),
    },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-2000);
  });
  const pid = child.pid ?? 0;
  let sampler: NodeJS.Timeout | undefined;
  try {
    // Ready when both queues have a worker of the child registered.
    const readyBy = Date.now() + 30_000;
    while (
      (await queues.rewardSync.getWorkersCount()) < 1 ||
      (await queues.reconciliation.getWorkersCount()) < 1
    ) {
      if (child.exitCode !== null) throw new Error(`worker exited ${child.exitCode}: ${stderr}`);
      if (Date.now() > readyBy) throw new Error(`worker not ready after 30 s: ${stderr}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    const redisBaseline = await usedMemory(run.redis);
    let redisPeak = redisBaseline;
    let peakJobs = 0;
    let sampling = false;
    const rssKiB: { at: number; kib: number }[] = [];
    sampler = setInterval(() => {
      rssKiB.push({ at: performance.now(), kib: procStatusKiB(pid, 'VmRSS') });
      if (sampling) return;
      sampling = true;
      Promise.all([
        usedMemory(run.redis),
        queues.rewardSync.getJobCounts(
          'wait',
          'prioritized',
          'delayed',
          'active',
          'completed',
          'failed',
        ),
      ])
        .then(([used, counts]) => {
          redisPeak = Math.max(redisPeak, used);
          peakJobs = Math.max(
            peakJobs,
            Object.values(counts).reduce((a, b) => a + b, 0),
          );
        })
        .catch(() => {})
        .finally(() => {
          sampling = false;
        });
    }, 100);

    const started = performance.now();
    const { jobId } = await startReconciliation(queues);
    let fanOutMs = 0;
    const deadline = Date.now() + 60 * 60_000;
    for (;;) {
      if (child.exitCode !== null) throw new Error(`worker exited ${child.exitCode}: ${stderr}`);
      if (Date.now() > deadline) throw new Error('fan-out not finished within an hour');
      if (fanOutMs === 0) {
        const state = await queues.reconciliation.getJobState(jobId);
        if (state === 'failed') throw new Error('the reconciliation failed');
        if (state === 'completed') fanOutMs = performance.now() - started;
      } else {
        const counts = await queues.rewardSync.getJobCounts(
          'wait',
          'prioritized',
          'delayed',
          'active',
        );
        if (Object.values(counts).every((n) => n === 0)) break;
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    const drainMs = performance.now() - started;
    const { rows } = await run.pool.query<{ n: string }>(
      `select count(*)::text as n from ${schema}.consumers where last_synced_at is not null`,
    );
    if (Number(rows[0]?.n) !== consumers) {
      throw new Error(`expected ${consumers} consumers synced, found ${rows[0]?.n}`);
    }
    const peakRssMiB = procStatusKiB(pid, 'VmHWM') / 1024;
    const secondHalf = rssKiB.filter(
      (s) => s.at >= started + drainMs / 2 && s.at <= started + drainMs && s.kib > 0,
    );
    const steadyRssMiB =
      secondHalf.reduce((sum, s) => sum + s.kib, 0) / Math.max(1, secondHalf.length) / 1024;
    ctx.note(
      `  ${consumers} consumers: fan-out ${Math.round(fanOutMs)} ms, all synced ${Math.round(drainMs)} ms, worker peak RSS ${peakRssMiB.toFixed(1)} MiB, mean RSS of the second half ${steadyRssMiB.toFixed(1)} MiB`,
    );
    return {
      consumers,
      fanOutMs,
      drainMs,
      peakRssMiB,
      steadyRssMiB,
      redisPeakDeltaMiB: (redisPeak - redisBaseline) / 1024 ** 2,
      peakJobs,
    };
  } finally {
    clearInterval(sampler);
    child.kill('SIGTERM');
    const stop = setTimeout(() => child.kill('SIGKILL'), 15_000);
    await exited(child);
    clearTimeout(stop);
    await closeQueues(queues);
    connection.disconnect();
    await sandbox.close();
    await deletePrefix(run.redis, prefix);
    await dropSchema(run, schema);
  }
}

export const scenario5: Scenario = {
  id: 5,
  title: 'Reconciliation fan-out',
  async run(ctx: BenchContext): Promise<ScenarioResult> {
    const large = ctx.fanout ?? (ctx.quick ? 12_000 : 1_000_000);
    const knobs = knobsOf(ctx.quick);
    const bound = jobBound(knobs);
    const small = smallerRun(large);
    const a = await fanOut(ctx, ctx.run, small, 's5_small', knobs);
    const b = await fanOut(ctx, ctx.run, large, 's5_large', knobs);
    const figures: ScenarioResult['figures'] = {};
    for (const f of [a, b]) {
      const n = f.consumers.toLocaleString('en-US');
      figures[`${n}: fan-out s`] = round(f.fanOutMs / 1000, 1);
      figures[`${n}: all synced s`] = round(f.drainMs / 1000, 1);
      figures[`${n}: syncs/s`] = Math.round((f.consumers * 1000) / f.drainMs);
      figures[`${n}: worker peak RSS MiB`] = round(f.peakRssMiB, 1);
      figures[`${n}: worker mean RSS MiB, second half`] = round(f.steadyRssMiB, 1);
      figures[`${n}: Redis peak used_memory +MiB`] = round(f.redisPeakDeltaMiB, 1);
      figures[`${n}: peak jobs in Redis`] = f.peakJobs;
    }
    return {
      id: 5,
      title: this.title,
      inputs: {
        consumers: `${small.toLocaleString('en-US')} then ${large.toLocaleString('en-US')}`,
        batch: knobs.reconcileBatchSize,
        maxPending: knobs.reconcileMaxPending,
        keepCompleted: knobs.keepCompletedJobs,
        syncConcurrency: defaultWorker.syncConcurrency,
        consumersPerJob: perJob,
      },
      figures,
      ratio: round(b.peakRssMiB / a.peakRssMiB),
      goal: '≤ 1.2 (peak RSS at N ÷ at the smaller N)',
      extraRatios: {
        Jobs: { ratio: round(b.peakJobs / bound), goal: `≤ 1 (peak jobs ÷ ${bound})` },
      },
    };
  },
};
