/**
 * Scenario 3: re-sync of unchanged data. The same lab syncs a data set twice from empty
 * tables (the first-sync rate, the WAL of a new row), then re-syncs it unchanged several
 * times. WAL is read from pg_current_wal_lsn, which counts every writer of the cluster:
 * the least of the runs is kept, since other writers only ever add to it.
 */
import { startLab } from './lab.js';
import {
  type BenchContext,
  perSecond,
  round,
  type Scenario,
  type ScenarioResult,
} from './scenario.js';
import { consumerIdsOf, describeSet, emptyLab, syncThroughWorker } from './sync-runs.js';

export const scenario3: Scenario = {
  id: 3,
  title: 'Re-sync of unchanged data',
  async run(ctx: BenchContext): Promise<ScenarioResult> {
    const set = ctx.quick ? { consumers: 50, rewards: 1000 } : { consumers: 200, rewards: 1000 };
    const firstRounds = 2;
    const resyncRounds = 3;
    const rows = set.consumers * set.rewards;
    const lab = await startLab(ctx.run, {
      name: 's3',
      sandbox: { consumers: set.consumers, rewardsPerConsumer: set.rewards },
    });
    try {
      const ids = consumerIdsOf(lab.sandbox);
      let firstMs = Number.POSITIVE_INFINITY;
      let newRowWal = Number.POSITIVE_INFINITY;
      for (let r = 1; r <= firstRounds; r++) {
        if (r > 1) await emptyLab(ctx.run, lab);
        const t = await syncThroughWorker(ctx.run, lab, ids, rows);
        ctx.note(
          `  first sync ${r}: ${perSecond(rows, t.ms)} rewards/s, ${Math.round(t.walBytes / rows)} B WAL/row`,
        );
        firstMs = Math.min(firstMs, t.ms);
        newRowWal = Math.min(newRowWal, t.walBytes / rows);
      }
      let resyncMs = Number.POSITIVE_INFINITY;
      let unchangedWal = Number.POSITIVE_INFINITY;
      for (let r = 1; r <= resyncRounds; r++) {
        const t = await syncThroughWorker(ctx.run, lab, ids, rows);
        ctx.note(
          `  re-sync ${r}: ${perSecond(rows, t.ms)} rewards/s, ${round(t.walBytes / rows, 1)} B WAL/row`,
        );
        resyncMs = Math.min(resyncMs, t.ms);
        unchangedWal = Math.min(unchangedWal, t.walBytes / rows);
      }
      const { rows: check } = await ctx.run.pool.query<{ n: string }>(
        `select count(*)::text as n from ${lab.schema}.rewards`,
      );
      if (Number(check[0]?.n) !== rows)
        throw new Error(`expected ${rows} rewards, found ${check[0]?.n}`);
      return {
        id: 3,
        title: this.title,
        inputs: {
          set: describeSet(set),
          latencyMs: 0,
          'first syncs': firstRounds,
          're-syncs': resyncRounds,
        },
        figures: {
          'first sync rewards/s': perSecond(rows, firstMs),
          're-sync rewards/s': perSecond(rows, resyncMs),
          'WAL B per new row': Math.round(newRowWal),
          'WAL B per unchanged row': round(unchangedWal, 1),
        },
        ratio: round(firstMs / resyncMs),
        goal: '≥ 1.3 (re-sync rate ÷ first-sync rate)',
        extraRatios: {
          Wal: { ratio: round(unchangedWal / newRowWal), goal: '≤ 0.15 (unchanged ÷ new row WAL)' },
        },
      };
    } finally {
      await lab.close();
    }
  },
};
