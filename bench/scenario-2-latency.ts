/**
 * Scenario 2: latency-bound. Every API response takes L = 20 ms more; Q consumers of one page
 * each make Q requests, at most C at once (C API connections). No client can beat Q·L/C: the
 * figure is the wall time over that bound.
 *
 * The worker runs 1.5·C sync jobs on its C connections (README, "Scaling out"): a job also spends
 * time outside HTTP (its write, its queue moves), and while it does, another job's request
 * keeps the connection busy. The same run with C jobs is reported beside it. The syncs come as
 * a reconciliation fans them out, SYNC_CONSUMERS_PER_JOB to a job, so either way more syncs
 * than connections are under way and their requests wait their turn for a connection.
 *
 * Q·L/C is the bound only on a machine that can do the work of C/L requests a second. The
 * same run at 0 ms measures what this machine can do (its CPU: the worker, the sandbox,
 * Redis and Postgres share the cores); the extra ratio divides the wall time by the larger of
 * the two bounds, which shows how well the worker overlaps the latency where the machine,
 * not the latency, is the bound (bench/RESULTS.md, round 7). Full runs only: a quick run
 * must fit two minutes on the slower machine.
 */
import { fanOutConsumersPerJob } from '../src/config.js';
import { enqueueRewardSync } from '../src/queues/producer.js';
import { type BenchRun, defaultWorker, startLab } from './lab.js';
import { type BenchContext, round, type Scenario, type ScenarioResult } from './scenario.js';
import { consumerIdsOf, syncThroughWorker } from './sync-runs.js';

const latencyMs = 20;
const connections = 16;
const jobsPerConnection = 1.5;

interface Measured {
  ms: number;
  requests: number;
}

async function measure(
  run: BenchRun,
  requests: number,
  jobs: number,
  latency = latencyMs,
): Promise<Measured> {
  const rewards = 10;
  const lab = await startLab(run, {
    name: `s2_${jobs}_${latency}`,
    sandbox: { consumers: requests, rewardsPerConsumer: rewards, latencyMs: latency },
    worker: { syncConcurrency: jobs },
    connections,
  });
  try {
    // Warm-up outside the clock: the token mint and the first connections.
    await lab.sandbox.state.addConsumer('warm_up', { rewards: 1 });
    await enqueueRewardSync(lab.runtime.ctx.queues, { consumerId: 'warm_up' });
    await lab.until(() => lab.counts.rewardSync.completed >= 1, 60_000);
    const before = (await lab.sandbox.state.counters()).requests.listRewards ?? 0;
    const ids = (await consumerIdsOf(lab.sandbox)).filter((id) => id !== 'warm_up');
    const timed = await syncThroughWorker(run, lab, ids, requests * rewards);
    const made = ((await lab.sandbox.state.counters()).requests.listRewards ?? 0) - before;
    return { ms: timed.ms, requests: made };
  } finally {
    await lab.close();
  }
}

export const scenario2: Scenario = {
  id: 2,
  title: 'Latency-bound sync (20 ms per request)',
  async run(ctx: BenchContext): Promise<ScenarioResult> {
    const requests = ctx.quick ? 960 : 3200;
    const jobs = Math.round(connections * jobsPerConnection);
    const tuned = await measure(ctx.run, requests, jobs);
    const plain = await measure(ctx.run, requests, connections);
    const machine = ctx.quick ? undefined : await measure(ctx.run, requests, jobs, 0);
    const bound = (m: Measured) => (m.requests * latencyMs) / connections;
    return {
      id: 2,
      title: this.title,
      inputs: {
        'Q requests': tuned.requests,
        'L ms': latencyMs,
        'C connections': connections,
        'sync jobs': jobs,
        'consumers per job': fanOutConsumersPerJob(defaultWorker),
        'rewards per request': 10,
      },
      figures: {
        'wall ms': Math.round(tuned.ms),
        'bound Q·L/C ms': Math.round(bound(tuned)),
        'requests/s': Math.round((tuned.requests * 1000) / tuned.ms),
        [`wall ÷ bound with ${connections} jobs`]: round(plain.ms / bound(plain)),
        ...(machine ? { 'wall ms at 0 ms latency': Math.round(machine.ms) } : {}),
      },
      ratio: round(tuned.ms / bound(tuned)),
      goal: '≤ 1.2',
      ...(machine
        ? {
            extraRatios: {
              Machine: {
                ratio: round(tuned.ms / Math.max(bound(tuned), machine.ms)),
                goal: '≤ 1.2 (wall ÷ the larger of Q·L/C and the same run at 0 ms)',
              },
            },
          }
        : {}),
    };
  },
};
