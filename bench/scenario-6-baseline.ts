/**
 * Scenario 6: what a user might write instead of the worker, on scenario 1's first data set:
 * one consumer after the other, one page after the other (fetch + JSON.parse), one INSERT ...
 * ON CONFLICT per reward on one connection. It runs for a bounded time on a prefix of the
 * consumers (it is slow); the worker syncs the whole set. The figure is the ratio of rates.
 */
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import type { RewardJson } from '../src/sandbox/index.js';
import { type BenchRun, createSchema, dropSchema, startLab } from './lab.js';
import {
  type BenchContext,
  perSecond,
  round,
  type Scenario,
  type ScenarioResult,
} from './scenario.js';
import { firstSyncSets } from './scenario-1-first-sync.js';
import { consumerIdsOf, describeSet, syncThroughWorker } from './sync-runs.js';

const insertReward = (s: string) => `
  insert into ${s}.rewards (id, consumer_id, amount, type, status, consumer_status, created_at,
    transaction_external_id, transaction_executed_at, brand_name, brand_logo, raw,
    first_seen_at, last_seen_at, observed_at)
  values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, now(), now(), now())
  on conflict (id) do update set amount = excluded.amount, status = excluded.status,
    consumer_status = excluded.consumer_status, raw = excluded.raw, last_seen_at = now(),
    observed_at = now()`;

/** The hand-written script, stopped after `budgetMs`. Returns the rows it wrote and its time. */
async function naiveScript(
  run: BenchRun,
  baseUrl: string,
  credentials: { clientId: string; clientSecret: string },
  consumerIds: readonly string[],
  budgetMs: number,
): Promise<{ rows: number; ms: number; consumers: number }> {
  const schema = 'bench_s6_naive';
  await createSchema(run, schema);
  const client = new pg.Client({ connectionString: run.databaseUrl });
  await client.connect();
  try {
    const basic = Buffer.from(`${credentials.clientId}:${credentials.clientSecret}`).toString(
      'base64',
    );
    const tokenResponse = await fetch(`${baseUrl}/tokens`, {
      method: 'POST',
      headers: {
        authorization: `Basic ${basic}`,
        'content-type': 'application/json',
        'x-api-version': '2.0.0',
      },
      body: '{"grant_type":"client_credentials"}',
    });
    const { access_token: token } = (await tokenResponse.json()) as { access_token: string };
    const headers = { authorization: `Bearer ${token}`, 'x-api-version': '2.0.0' };
    const sql = insertReward(schema);
    let rows = 0;
    let consumers = 0;
    const started = performance.now();
    for (const consumerId of consumerIds) {
      if (performance.now() - started > budgetMs) break;
      await client.query(
        `insert into ${schema}.consumers (consumer_id) values ($1) on conflict do nothing`,
        [consumerId],
      );
      for (let page = 1; ; page++) {
        const url = `${baseUrl}/perks/consumers/${consumerId}/rewards?page=${page}&per_page=1000&sort=-executed_at`;
        const response = await fetch(url, { headers });
        if (!response.ok) throw new Error(`baseline: HTTP ${response.status}`);
        const body = (await response.json()) as { items: RewardJson[]; meta: { total: number } };
        for (const r of body.items) {
          await client.query(sql, [
            r.id,
            consumerId,
            r.amount,
            r.type,
            r.status,
            r.consumer_status,
            r.created_at,
            r.transaction?.external_id ?? null,
            r.transaction?.executed_at ?? null,
            r.brand.name,
            r.brand.logo ?? null,
            r,
          ]);
          rows += 1;
        }
        if (page * 1000 >= body.meta.total) break;
      }
      consumers += 1;
    }
    return { rows, ms: performance.now() - started, consumers };
  } finally {
    await client.end();
    await dropSchema(run, schema);
  }
}

export const scenario6: Scenario = {
  id: 6,
  title: 'Speed-up over a hand-written script',
  async run(ctx: BenchContext): Promise<ScenarioResult> {
    const [set] = firstSyncSets(ctx.quick);
    if (!set) throw new Error('no data set');
    const budgetMs = ctx.quick ? 3000 : 20_000;
    const lab = await startLab(ctx.run, {
      name: 's6',
      sandbox: { consumers: set.consumers, rewardsPerConsumer: set.rewards },
    });
    try {
      const ids = await consumerIdsOf(lab.sandbox);
      const naive = await naiveScript(ctx.run, lab.sandbox.baseUrl, lab.sandbox, ids, budgetMs);
      ctx.note(
        `  hand-written script: ${naive.rows} rewards of ${naive.consumers} consumers in ${Math.round(naive.ms)} ms`,
      );
      const rows = set.consumers * set.rewards;
      const worker = await syncThroughWorker(ctx.run, lab, ids, rows);
      const workerRate = perSecond(rows, worker.ms);
      const naiveRate = perSecond(naive.rows, naive.ms);
      return {
        id: 6,
        title: this.title,
        inputs: {
          set: describeSet(set),
          'script budget s': budgetMs / 1000,
          'script consumers done': naive.consumers,
        },
        figures: { 'worker rewards/s': workerRate, 'script rewards/s': naiveRate },
        ratio: round(workerRate / naiveRate, 1),
        goal: 'speed-up (> 1)',
      };
    } finally {
      await lab.close();
    }
  },
};
