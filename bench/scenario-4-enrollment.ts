/**
 * Scenario 4: enrollment at 20 ms of added latency. Q enrollments at the default enrollment
 * concurrency C; the bound is C/L enrollments per second. Each enrollment also enqueues a
 * first sync, which runs meanwhile on the same process, as in production.
 */
import { performance } from 'node:perf_hooks';
import { enqueueEnrollment } from '../src/queues/producer.js';
import { defaultWorker, startLab } from './lab.js';
import { type BenchContext, round, type Scenario, type ScenarioResult } from './scenario.js';

const latencyMs = 20;

export const scenario4: Scenario = {
  id: 4,
  title: 'Enrollment (20 ms per request)',
  async run(ctx: BenchContext): Promise<ScenarioResult> {
    const count = ctx.quick ? 800 : 2500;
    const concurrency = defaultWorker.enrollConcurrency;
    const lab = await startLab(ctx.run, { name: 's4', sandbox: { latencyMs } });
    try {
      // Warm-up outside the clock: the token mint and the first connections.
      await enqueueEnrollment(lab.runtime.ctx.queues, { consumerId: 'warm_up' }, undefined);
      await lab.until(() => lab.counts.enrollment.completed >= 1, 60_000);

      const queues = lab.runtime.ctx.queues;
      const started = performance.now();
      for (let i = 0; i < count; i += 100) {
        const batch = Array.from({ length: Math.min(100, count - i) }, (_, k) =>
          enqueueEnrollment(
            queues,
            { consumerId: `enr_${String(i + k).padStart(6, '0')}` },
            undefined,
          ),
        );
        await Promise.all(batch);
      }
      await lab.until(() => lab.counts.enrollment.completed >= count + 1, 10 * 60_000);
      const ms = performance.now() - started;
      const rate = (count * 1000) / ms;
      const bound = (concurrency * 1000) / latencyMs;
      return {
        id: 4,
        title: this.title,
        inputs: { enrollments: count, 'L ms': latencyMs, 'C concurrency': concurrency },
        figures: {
          'wall ms': Math.round(ms),
          'enrollments/s': Math.round(rate),
          'bound C/L per s': bound,
          'sandbox created': (await lab.sandbox.state.counters()).enrollmentsCreated,
        },
        ratio: round(rate / bound),
        goal: '≥ 0.8 (of the concurrency bound)',
      };
    } finally {
      await lab.close();
    }
  },
};
