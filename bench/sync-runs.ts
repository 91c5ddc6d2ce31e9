/**
 * The ways scenarios 1, 3 and 6 write a data set: through the whole worker (queue, HTTP,
 * parse, store), the bare loop it is measured against (the same store statement on the
 * same number of connections, rows parsed in advance, no queue, no HTTP), and a plain upsert
 * of the same rows with no feed at all.
 */
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { fanOutConsumersPerJob } from '../src/jobs/sync-rewards-batch.js';
import { parseRewardPage } from '../src/perks/paging.js';
import type { Reward } from '../src/perks/schemas.js';
import { enqueueRewardSyncs } from '../src/queues/producer.js';
import { createStore } from '../src/store/store.js';
import { cpuElsewhereSince, cpuTimes } from './env.js';
import {
  type BenchRun,
  createSchema,
  defaultPoolSize,
  defaultWorker,
  dropSchema,
  type Lab,
  syncsInFlight,
  walBytesSince,
  walPosition,
} from './lab.js';
import type { RemoteSandbox } from './remote-sandbox.js';

export interface DataSet {
  consumers: number;
  rewards: number;
}

export const describeSet = (set: DataSet) => `${set.consumers} × ${set.rewards}`;

/** The sandbox's consumer ids for a generated data set (sbx_0001, ...). */
export function consumerIdsOf(sandbox: RemoteSandbox): Promise<string[]> {
  return sandbox.state.enrolledConsumerIds();
}

export interface Timed {
  ms: number;
  rows: number;
  walBytes: number;
  /** Reward write statements run, and the pages they wrote (pages ÷ statements: the batching). */
  writes: { statements: number; pages: number };
  /** CPU µs per row outside the bench process while a write loop ran: the database's. */
  dbCpuPerRowUs?: number;
}

const writesSince = (
  now: Timed['writes'],
  before: Timed['writes'] = { statements: 0, pages: 0 },
): Timed['writes'] => ({
  statements: now.statements - before.statements,
  pages: now.pages - before.pages,
});

/**
 * Enqueues a sync of every consumer as a reconciliation does (SYNC_CONSUMERS_PER_JOB to a
 * job, or `perJob`: 1 as after enrollments) and waits until they have all completed. The clock
 * starts before the first enqueue: enqueueing is part of what a user pays.
 */
export async function syncThroughWorker(
  run: BenchRun,
  lab: Lab,
  consumerIds: readonly string[],
  rows: number,
  perJob = fanOutConsumersPerJob(lab.config.worker),
): Promise<Timed> {
  const wal = await walPosition(run);
  const writes = { ...lab.runtime.ctx.store.writes };
  const target = lab.counts.rewardSync.completed + Math.ceil(consumerIds.length / perJob);
  const started = performance.now();
  // Slices of the reconciliation's default read batch, a whole number of jobs each.
  const slice = perJob * Math.ceil(defaultWorker.reconcileBatchSize / perJob);
  for (let i = 0; i < consumerIds.length; i += slice) {
    await enqueueRewardSyncs(lab.runtime.ctx.queues, consumerIds.slice(i, i + slice), 'manual', {
      consumersPerJob: perJob,
    });
  }
  await lab.until(() => lab.counts.rewardSync.completed >= target, 30 * 60_000);
  const ms = performance.now() - started;
  return {
    ms,
    rows,
    walBytes: await walBytesSince(run, wal),
    writes: writesSince(lab.runtime.ctx.store.writes, writes),
  };
}

export interface PreparedPage {
  consumerId: string;
  rewards: Reward[];
  /** The body the rewards were parsed from, as the worker passes it to the store. */
  json: string;
  /** On a consumer's last page: every id of its pages, which that statement ends the sync with. */
  seenIds?: string[];
}

/** Every page of every consumer, read from the sandbox's memory and parsed as the client does. */
export async function preparePages(
  sandbox: RemoteSandbox,
  consumerIds: readonly string[],
): Promise<PreparedPage[]> {
  const pages: PreparedPage[] = [];
  for (const consumerId of consumerIds) {
    const seenIds: string[] = [];
    for (let page = 1; ; page++) {
      const { itemsJson, total } = await sandbox.state.rewardPage(consumerId, {
        sort: '-executed_at',
        types: [],
        page,
        perPage: 1000,
      });
      const json = `{"items":${itemsJson},"meta":{"page":${page},"per_page":1000,"total":${total}}}`;
      const parsed = parseRewardPage('bench', JSON.parse(json));
      for (const reward of parsed.items) seenIds.push(reward.id);
      const last = page * 1000 >= total;
      pages.push({ consumerId, rewards: parsed.items, json, ...(last ? { seenIds } : {}) });
      if (last) break;
    }
  }
  return pages;
}

/**
 * The bare loop: `concurrency` writers (default: as many as the worker's syncs in flight)
 * take pages in turn and write each with the statement the worker writes it with (a
 * consumer's last page also ends its sync, as in the worker), through a pool of the worker's
 * size and a writer of the worker's limits, into a fresh schema.
 */
export async function bareLoop(
  run: BenchRun,
  schema: string,
  pages: readonly PreparedPage[],
  options: { concurrency?: number; poolSize?: number } = {},
): Promise<Timed> {
  await createSchema(run, schema);
  const store = createStore(
    { url: run.databaseUrl, schema, poolSize: options.poolSize ?? defaultPoolSize },
    { writers: syncsInFlight(), eventTypes: run.env.eventTypes },
  );
  try {
    // Open the connections first, as a running worker has them open.
    await Promise.all(Array.from({ length: store.pool.options.max ?? 1 }, () => store.ping()));
    const wal = await walPosition(run);
    const concurrency = options.concurrency ?? syncsInFlight();
    const loop = await writeAll(pages, concurrency, async (page) => {
      const observedAt = new Date();
      await store.writeRewardPage({
        consumerId: page.consumerId,
        rewards: page.rewards,
        json: page.json,
        observedAt,
        ...(page.seenIds
          ? {
              finish: {
                missing: { seenIds: page.seenIds, scanStartedAt: observedAt },
                at: observedAt,
              },
            }
          : {}),
      });
    });
    return { ...loop, walBytes: await walBytesSince(run, wal), writes: writesSince(store.writes) };
  } finally {
    await store.close();
    await dropSchema(run, schema);
  }
}

/** Writes every page with `writers` loops taking the next page each; the wall time and rows. */
async function writeAll(
  pages: readonly PreparedPage[],
  writers: number,
  write: (page: PreparedPage) => Promise<void>,
): Promise<{ ms: number; rows: number; dbCpuPerRowUs?: number }> {
  let next = 0;
  let rows = 0;
  const cpu = { machine: cpuTimes(), own: process.cpuUsage() };
  const started = performance.now();
  const writer = async () => {
    for (let i = next++; i < pages.length; i = next++) {
      const page = pages[i];
      if (!page) continue;
      await write(page);
      rows += page.rewards.length;
    }
  };
  await Promise.all(Array.from({ length: writers }, writer));
  const ms = performance.now() - started;
  const elsewhere = cpuElsewhereSince(cpu);
  return elsewhere === undefined
    ? { ms, rows }
    : { ms, rows, dbCpuPerRowUs: (elsewhere * 1e6) / rows };
}

/**
 * The floor of a first sync with no feed: each page's items upserted by one plain
 * `insert … select … from jsonb_array_elements … on conflict` into a copy of `rewards` (its
 * indexes, no foreign key), on `connections` connections. No events, no pending marks, no
 * status changes, no consumer row.
 */
export async function plainUpsertLoop(
  run: BenchRun,
  schema: string,
  pages: readonly PreparedPage[],
  connections = 4,
): Promise<Timed> {
  await createSchema(run, schema);
  const table = `${schema}.plain_rewards`;
  await run.pool.query(`create table ${table} (like ${schema}.rewards including all)`);
  const pool = new pg.Pool({ connectionString: run.databaseUrl, max: connections });
  const sql = `insert into ${table} (id, consumer_id, amount, type, status, consumer_status,
      created_at, transaction_external_id, transaction_executed_at, brand_name, brand_logo, raw,
      first_seen_at, last_seen_at, observed_at)
    select (e.raw->>'id')::uuid, $2, w.amount, w.type, w.status, w.consumer_status, w.created_at,
           w.transaction->>'external_id', (w.transaction->>'executed_at')::timestamptz,
           w.brand->>'name', w.brand->>'logo', e.raw, $3, $3, $3
    from jsonb_array_elements($1::jsonb->'items') as e(raw)
    cross join lateral jsonb_to_record(e.raw) as w(amount numeric, type text, status text,
      consumer_status text, created_at timestamptz, transaction jsonb, brand jsonb)
    on conflict (id) do update set amount = excluded.amount, type = excluded.type,
      status = excluded.status, consumer_status = excluded.consumer_status, raw = excluded.raw,
      last_seen_at = excluded.last_seen_at, observed_at = excluded.observed_at`;
  try {
    await Promise.all(Array.from({ length: connections }, () => pool.query('select 1')));
    const wal = await walPosition(run);
    const loop = await writeAll(pages, connections, async (page) => {
      await pool.query(sql, [page.json, page.consumerId, new Date()]);
    });
    const writes = { statements: pages.length, pages: pages.length };
    return { ...loop, walBytes: await walBytesSince(run, wal), writes };
  } finally {
    await pool.end();
    await dropSchema(run, schema);
  }
}

/** Empties a lab's tables, so that its next sync writes new rows again. */
export async function emptyLab(run: BenchRun, lab: Lab): Promise<void> {
  await run.pool.query(
    `truncate ${lab.schema}.reward_status_changes, ${lab.schema}.rewards, ${lab.schema}.consumers`,
  );
}
