/**
 * Scenario 3: re-sync of unchanged data. The same lab syncs a data set twice from empty
 * tables (the first-sync rate, the WAL of a new row), then re-syncs it unchanged several
 * times. WAL is read from pg_current_wal_lsn, which counts every writer of the cluster:
 * the least of the runs is kept, since other writers only ever add to it.
 */
import { createStore } from '../src/store/store.js';
import {
  type BenchRun,
  createSchema,
  dropSchema,
  startLab,
  walBytesSince,
  walPosition,
} from './lab.js';
import {
  type BenchContext,
  perSecond,
  round,
  type Scenario,
  type ScenarioResult,
} from './scenario.js';
import {
  consumerIdsOf,
  describeSet,
  emptyLab,
  type PreparedPage,
  preparePages,
  syncThroughWorker,
} from './sync-runs.js';

/**
 * WAL of the page statement alone: each page written new, then rewritten unchanged, with the
 * LSN read just around the one statement on an otherwise idle connection. Other writers of
 * the cluster can only add to a window, so the least of the repetitions is the statement's own.
 */
async function statementWal(
  run: BenchRun,
  pages: readonly PreparedPage[],
  repeats: number,
): Promise<{ newRow: number; unchangedRow: number }> {
  const schema = 'bench_s3_wal';
  await createSchema(run, schema);
  const store = createStore(
    { url: run.databaseUrl, schema, poolSize: 1 },
    { eventTypes: run.env.eventTypes },
  );
  let newRow = Number.POSITIVE_INFINITY;
  let unchangedRow = Number.POSITIVE_INFINITY;
  try {
    await store.ping();
    for (const page of pages) {
      const n = page.rewards.length;
      if (n === 0) continue; // a consumer without rewards: no row to divide by
      let start = await walPosition(run);
      const input = { consumerId: page.consumerId, rewards: page.rewards };
      await store.writeRewardPage({ ...input, observedAt: new Date() });
      newRow = Math.min(newRow, (await walBytesSince(run, start)) / n);
      for (let r = 0; r < repeats; r++) {
        start = await walPosition(run);
        await store.writeRewardPage({ ...input, observedAt: new Date() });
        unchangedRow = Math.min(unchangedRow, (await walBytesSince(run, start)) / n);
      }
    }
  } finally {
    await store.close();
    await dropSchema(run, schema);
  }
  return { newRow, unchangedRow };
}

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
      const ids = await consumerIdsOf(lab.sandbox);
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
      const isolated = await statementWal(
        ctx.run,
        await preparePages(lab.sandbox, ids.slice(0, 5)),
        3,
      );
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
          'WAL B per new row (whole run, cluster-wide)': Math.round(newRowWal),
          'WAL B per unchanged row (whole run, cluster-wide)': round(unchangedWal, 1),
          'WAL B per new row (page statement alone)': Math.round(isolated.newRow),
          'WAL B per unchanged row (page statement alone)': round(isolated.unchangedRow, 1),
        },
        ratio: round(firstMs / resyncMs),
        goal: '≥ 1.3 (re-sync rate ÷ first-sync rate)',
        extraRatios: {
          Wal: {
            ratio: round(isolated.unchangedRow / isolated.newRow),
            goal: '≤ 0.15 (unchanged ÷ new row WAL, page statement alone)',
          },
          WalRun: {
            ratio: round(unchangedWal / newRowWal),
            goal: 'same over whole runs (cluster-wide LSN: others add)',
          },
        },
      };
    } finally {
      await lab.close();
    }
  },
};
