/**
 * Scenario 1: first full sync, database-bound (no added latency). Rewards/s through the whole
 * worker divided by the rewards/s of the bare loop (same statement, same connections, no queue,
 * no HTTP). Each side runs `rounds` times on fresh tables, alternating; the best of each counts.
 */
import { defaultWorker, startLab } from './lab.js';
import {
  type BenchContext,
  perSecond,
  round,
  type Scenario,
  type ScenarioResult,
} from './scenario.js';
import {
  bareLoop,
  consumerIdsOf,
  type DataSet,
  describeSet,
  emptyLab,
  preparePages,
  syncThroughWorker,
} from './sync-runs.js';

export const firstSyncSets = (quick: boolean): DataSet[] =>
  quick
    ? [
        { consumers: 50, rewards: 1000 },
        { consumers: 10_000, rewards: 10 },
      ]
    : [
        { consumers: 200, rewards: 1000 },
        { consumers: 20_000, rewards: 10 },
      ];

export interface FirstSyncFigures {
  workerPerSecond: number;
  barePerSecond: number;
  ratio: number;
  /** WAL of one new reward row (least of the runs: other writers only add). */
  walPerNewRow: number;
}

export async function measureFirstSync(
  ctx: BenchContext,
  set: DataSet,
  name: string,
  rounds: number,
): Promise<FirstSyncFigures> {
  const lab = await startLab(ctx.run, {
    name,
    sandbox: { consumers: set.consumers, rewardsPerConsumer: set.rewards },
  });
  try {
    const ids = await consumerIdsOf(lab.sandbox);
    const rows = set.consumers * set.rewards;
    const pages = await preparePages(lab.sandbox, ids);
    let worker = Number.POSITIVE_INFINITY;
    let bare = Number.POSITIVE_INFINITY;
    let wal = Number.POSITIVE_INFINITY;
    for (let r = 1; r <= rounds; r++) {
      const b = await bareLoop(ctx.run, `bench_${name}_bare`, pages);
      ctx.note(`  ${describeSet(set)} bare loop round ${r}: ${perSecond(b.rows, b.ms)} rewards/s`);
      if (r > 1) await emptyLab(ctx.run, lab);
      const w = await syncThroughWorker(ctx.run, lab, ids, rows);
      ctx.note(`  ${describeSet(set)} worker round ${r}: ${perSecond(w.rows, w.ms)} rewards/s`);
      bare = Math.min(bare, b.ms);
      worker = Math.min(worker, w.ms);
      wal = Math.min(wal, b.walBytes / b.rows, w.walBytes / w.rows);
    }
    const workerPerSecond = perSecond(rows, worker);
    const barePerSecond = perSecond(rows, bare);
    return {
      workerPerSecond,
      barePerSecond,
      ratio: round(bare / worker),
      walPerNewRow: Math.round(wal),
    };
  } finally {
    await lab.close();
  }
}

export const scenario1: Scenario = {
  id: 1,
  title: 'First full sync, database-bound',
  async run(ctx: BenchContext): Promise<ScenarioResult> {
    const sets = firstSyncSets(ctx.quick);
    const rounds = ctx.quick ? 2 : 3;
    const figures: ScenarioResult['figures'] = {};
    let worst = Number.POSITIVE_INFINITY;
    for (const [i, set] of sets.entries()) {
      const f = await measureFirstSync(ctx, set, `s1_${i}`, rounds);
      const label = describeSet(set);
      figures[`${label}: worker rewards/s`] = f.workerPerSecond;
      figures[`${label}: bare loop rewards/s`] = f.barePerSecond;
      figures[`${label}: ratio`] = f.ratio;
      worst = Math.min(worst, f.ratio);
    }
    return {
      id: 1,
      title: this.title,
      inputs: {
        sets: sets.map(describeSet).join(', '),
        latencyMs: 0,
        syncConcurrency: defaultWorker.syncConcurrency,
        dbConnections: 10,
        bestOf: rounds,
      },
      figures,
      ratio: worst,
      goal: '≥ 0.75 (worst set)',
    };
  },
};
