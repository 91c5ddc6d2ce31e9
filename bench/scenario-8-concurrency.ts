/**
 * Scenario 8: concurrency found, not configured. Q one-page consumers, every API answer 20 ms
 * later, synced by a reconciliation's fan-out on default settings: the worker lets out as many
 * requests as answers allow (src/perks/concurrency.ts), up to PERKS_CONNECTIONS. The sandbox
 * counts the requests in flight; with P their peak, no client holding at most P requests beats
 * Q·L/P, and the figure is the wall time over that bound.
 *
 * The same run against a sandbox that refuses with a 429 any request beyond 24 in flight, a
 * limit the worker is not told: the share of requests refused says whether it found the limit
 * and kept under it. Then the open run again with each consumer a sync job of its own (as after
 * enrollments), which a replica runs SYNC_CONCURRENCY at a time. A quarter as many consumers
 * again are synced first in each, outside the clock.
 */
import { type Lab, startLab } from './lab.js';
import {
  type BenchContext,
  perSecond,
  round,
  type Scenario,
  type ScenarioResult,
} from './scenario.js';
import { consumerIdsOf, syncThroughWorker } from './sync-runs.js';

const latencyMs = 20;
const hiddenLimit = 24;

interface Run {
  ms: number;
  requests: number;
  peakInFlight: number;
  refused: number;
  limit: number;
}

async function limitOf(lab: Lab): Promise<number> {
  const text = await lab.runtime.metrics.scrape();
  return Number(/^perks_worker_api_concurrency_limit (\d+)/m.exec(text)?.[1] ?? Number.NaN);
}

/** `perJob` 1: each consumer a sync job of its own; default: the fan-out's jobs. */
async function measure(
  ctx: BenchContext,
  consumers: number,
  { concurrencyLimit, perJob }: { concurrencyLimit?: number; perJob?: number } = {},
) {
  const warmUp = Math.round(consumers / 4);
  const name = `s8_${concurrencyLimit === undefined ? 'open' : 'capped'}${perJob ?? ''}`;
  const lab = await startLab(ctx.run, {
    name,
    sandbox: {
      consumers: warmUp + consumers,
      rewardsPerConsumer: 1,
      latencyMs,
      ...(concurrencyLimit === undefined ? {} : { concurrencyLimit }),
    },
  });
  try {
    const ids = await consumerIdsOf(lab.sandbox);
    await syncThroughWorker(ctx.run, lab, ids.slice(0, warmUp), warmUp, perJob);
    // P is the timed run's own peak: the warm-up's start may have let out more.
    await lab.sandbox.state.restartPeakInFlight();
    const before = await lab.sandbox.state.counters();
    const timed = await syncThroughWorker(ctx.run, lab, ids.slice(warmUp), consumers, perJob);
    const after = await lab.sandbox.state.counters();
    const listed = (c: typeof after) => c.requests.listRewards ?? 0;
    return {
      ms: timed.ms,
      requests: listed(after) - listed(before),
      peakInFlight: after.peakInFlight,
      refused: after.overConcurrencyLimit - before.overConcurrencyLimit,
      limit: await limitOf(lab),
    } satisfies Run;
  } finally {
    await lab.close();
  }
}

export const scenario8: Scenario = {
  id: 8,
  title: 'Concurrency found (20 ms per request)',
  async run(ctx: BenchContext): Promise<ScenarioResult> {
    const consumers = ctx.quick ? 2000 : 10_000;
    const open = await measure(ctx, consumers);
    ctx.note(`scenario 8: open API done, ${perSecond(consumers, open.ms)} consumers/s`);
    const capped = await measure(ctx, consumers, { concurrencyLimit: hiddenLimit });
    const single = await measure(ctx, consumers, { perJob: 1 });
    const answered = open.requests - open.refused;
    const boundMs = (answered * latencyMs) / open.peakInFlight;
    return {
      id: 8,
      title: this.title,
      inputs: { consumers, 'L ms': latencyMs, 'hidden limit': hiddenLimit },
      figures: {
        'wall ms': Math.round(open.ms),
        'consumers/s': perSecond(consumers, open.ms),
        'peak requests in flight': open.peakInFlight,
        'bound Q·L/P ms': Math.round(boundMs),
        'limit at the end': open.limit,
        'capped: consumers/s': perSecond(consumers, capped.ms),
        'capped: peak in flight': capped.peakInFlight,
        'capped: refused %': round((100 * capped.refused) / capped.requests, 2),
        'capped: limit at the end': capped.limit,
        'a job each: consumers/s': perSecond(consumers, single.ms),
        'a job each: peak in flight': single.peakInFlight,
      },
      ratio: round(open.ms / boundMs),
      goal: '≤ 1.15 (wall ÷ Q·L/P), at ≥ 2,000 consumers/s',
      extraRatios: {
        Refused: {
          ratio: round(capped.refused / capped.requests, 4),
          goal: '≤ 0.02 (share of requests refused beyond the hidden limit)',
        },
      },
    };
  },
};
