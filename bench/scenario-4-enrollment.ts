/**
 * Scenario 4: enrollment at 20 ms of added latency. Q enrollments at the default enrollment
 * concurrency C; the bound is C/L enrollments per second. Each enrollment also enqueues a
 * first sync, which runs meanwhile on the same process, as in production.
 *
 * C/L is the bound only on a machine that can do that much work a second: the same enrollments
 * at 0 ms measure what this one can do, and the ratio divides the rate by the smaller of the
 * two bounds. It says how much of the API's latency the worker hides, not how fast the host is.
 *
 * A quarter as many enrollments again are made first, outside the clock.
 */
import { performance } from 'node:perf_hooks';
import { enqueueEnrollment } from '../src/queues/producer.js';
import { type BenchRun, defaultWorker, type Lab, startLab } from './lab.js';
import { type BenchContext, round, type Scenario, type ScenarioResult } from './scenario.js';

const latencyMs = 20;

/** Enrollments made outside the clock first: a quarter as many as are measured. */
const warmUpOf = (count: number) => Math.round(count / 4);

/** Enqueues `count` enrollments (`<tag>_000000`, ...) and waits until `completedInAll`. */
async function enrollAll(
  lab: Lab,
  tag: string,
  count: number,
  completedInAll: number,
): Promise<void> {
  const queues = lab.runtime.ctx.queues;
  for (let i = 0; i < count; i += 100) {
    const batch = Array.from({ length: Math.min(100, count - i) }, (_, k) =>
      enqueueEnrollment(
        queues,
        { consumerId: `${tag}_${String(i + k).padStart(6, '0')}` },
        undefined,
      ),
    );
    await Promise.all(batch);
  }
  await lab.until(() => lab.counts.enrollment.completed >= completedInAll, 10 * 60_000);
}

/** Milliseconds from the first enqueue to the last enrollment done. */
async function enroll(run: BenchRun, count: number, latency: number): Promise<number> {
  const lab = await startLab(run, { name: `s4_${latency}`, sandbox: { latencyMs: latency } });
  try {
    // Warm-up outside the clock, as in scenario 2: the token mint, the first connections,
    // and a worker and an API that have been running a while.
    const warmUp = warmUpOf(count);
    await enrollAll(lab, 'warm', warmUp, warmUp);
    // Each enrollment queued a first sync: those too end before the clock starts.
    await lab.until(() => lab.counts.rewardSync.completed >= warmUp, 10 * 60_000);

    const started = performance.now();
    await enrollAll(lab, 'enr', count, warmUp + count);
    const ms = performance.now() - started;
    const created = (await lab.sandbox.state.counters()).enrollmentsCreated;
    if (created !== warmUp + count)
      throw new Error(`expected ${warmUp + count} enrollments, sandbox has ${created}`);
    return ms;
  } finally {
    await lab.close();
  }
}

export const scenario4: Scenario = {
  id: 4,
  title: 'Enrollment (20 ms per request)',
  async run(ctx: BenchContext): Promise<ScenarioResult> {
    const count = ctx.quick ? 800 : 2500;
    const concurrency = defaultWorker.enrollConcurrency;
    const ms = await enroll(ctx.run, count, latencyMs);
    const machineMs = await enroll(ctx.run, count, 0);
    const rate = (count * 1000) / ms;
    const machineRate = (count * 1000) / machineMs;
    const bound = (concurrency * 1000) / latencyMs;
    return {
      id: 4,
      title: this.title,
      inputs: {
        enrollments: count,
        'L ms': latencyMs,
        'C concurrency': concurrency,
        'warm-up enrollments': warmUpOf(count),
      },
      figures: {
        'wall ms': Math.round(ms),
        'enrollments/s': Math.round(rate),
        'bound C/L per s': bound,
        'enrollments/s at 0 ms latency': Math.round(machineRate),
      },
      ratio: round(rate / Math.min(bound, machineRate)),
      goal: '≥ 0.8 (of the smaller of C/L and the rate at 0 ms)',
    };
  },
};
