/**
 * Scenario 2: latency-bound. Every API response takes L = 20 ms more; Q consumers of one page
 * each make Q requests, at sync concurrency C. No client can beat Q·L/C: the figure is the
 * wall time over that bound.
 */
import { enqueueRewardSync } from '../src/queues/producer.js';
import { startLab } from './lab.js';
import { type BenchContext, round, type Scenario, type ScenarioResult } from './scenario.js';
import { consumerIdsOf, syncThroughWorker } from './sync-runs.js';

const latencyMs = 20;
const concurrency = 16;

export const scenario2: Scenario = {
  id: 2,
  title: 'Latency-bound sync (20 ms per request)',
  async run(ctx: BenchContext): Promise<ScenarioResult> {
    const requests = ctx.quick ? 480 : 3200;
    const rewards = 10;
    const lab = await startLab(ctx.run, {
      name: 's2',
      sandbox: { consumers: requests, rewardsPerConsumer: rewards, latencyMs },
      worker: { syncConcurrency: Number(process.env.S2_JOBS ?? concurrency) },
      connections: concurrency,
    });
    try {
      // Warm-up outside the clock: the token mint and the first connections.
      await lab.sandbox.state.addConsumer('warm_up', { rewards: 1 });
      await enqueueRewardSync(lab.runtime.ctx.queues, { consumerId: 'warm_up' });
      await lab.until(() => lab.counts.rewardSync.completed >= 1, 60_000);
      const before = (await lab.sandbox.state.counters()).requests.listRewards ?? 0;

      const ids = (await consumerIdsOf(lab.sandbox)).filter((id) => id !== 'warm_up');
      const timed = await syncThroughWorker(ctx.run, lab, ids, requests * rewards);
      const ms = timed.ms;
      const made = ((await lab.sandbox.state.counters()).requests.listRewards ?? 0) - before;
      const boundMs = (made * latencyMs) / concurrency;
      return {
        id: 2,
        title: this.title,
        inputs: {
          'Q requests': made,
          'L ms': latencyMs,
          'C concurrency': concurrency,
          'rewards per request': rewards,
        },
        figures: {
          'wall ms': Math.round(ms),
          'bound Q·L/C ms': Math.round(boundMs),
          'requests/s': Math.round((made * 1000) / ms),
        },
        ratio: round(ms / boundMs),
        goal: '≤ 1.2',
      };
    } finally {
      await lab.close();
    }
  },
};
