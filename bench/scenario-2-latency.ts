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
 * not the latency, is the bound. Full runs only: a quick run must fit in two minutes on a
 * slow machine.
 *
 * Beside it, the floor: the same requests on C connections of a bare HTTP loop (undici alone,
 * no queue, no parse, no database) against a sandbox as warm. Its wall time over Q·L/C is the
 * best ratio this machine allows any client; what the worker adds is the rest.
 *
 * Each side first makes a quarter as many requests again outside the clock: a worker and an
 * API that have been running a while, not code compiled during the measurement. Then, in a
 * full run, the worker with 1.5·C jobs and the bare loop each make their Q requests three
 * times on fresh consumers and the best round counts: on a shared host CPU steal comes in
 * bursts that can triple one round's wall time. Each round's wall time and steal are
 * printed. The runs with C jobs and at 0 ms make one round.
 */
import { performance } from 'node:perf_hooks';
import { Pool } from 'undici';
import { fanOutConsumersPerJob } from '../src/jobs/sync-rewards-batch.js';
import { cpuTimes, stealSince } from './env.js';
import { type BenchRun, defaultWorker, startLab, syncsInFlight } from './lab.js';
import { type RemoteSandbox, startRemoteSandbox } from './remote-sandbox.js';
import { type BenchContext, round, type Scenario, type ScenarioResult } from './scenario.js';
import { consumerIdsOf, syncThroughWorker } from './sync-runs.js';

const latencyMs = 20;
const connections = 16;
const jobsPerConnection = 1.5;
const rewardsPerRequest = 10;
/** Requests made outside the clock first: a quarter as many as are measured. */
const warmUpOf = (requests: number) => Math.round(requests / 4);
/** Per request, as the worker's client has it by default (PERKS_TIMEOUT_MS). */
const requestTimeoutMs = 10_000;

interface Round {
  ms: number;
  requests: number;
  /** CPU steal during the round, in percent (undefined where it cannot be read). */
  steal: number | undefined;
}

/** The best (fastest) round, and every round in order. */
interface Measured extends Round {
  rounds: Round[];
}

/** Times `timed` on each of `rounds` slices of `ids` of `requests` ids each. */
async function inRounds(
  ids: readonly string[],
  requests: number,
  rounds: number,
  timed: (slice: readonly string[]) => Promise<{ ms: number; requests: number }>,
): Promise<Measured> {
  const done: Round[] = [];
  for (let r = 0; r < rounds; r++) {
    const before = cpuTimes();
    const { ms, requests: made } = await timed(ids.slice(r * requests, (r + 1) * requests));
    done.push({ ms, requests: made, steal: stealSince(before) });
  }
  const best = done.reduce((a, b) => (b.ms / b.requests < a.ms / a.requests ? b : a));
  return { ...best, rounds: done };
}

const describeRounds = (m: Measured) =>
  m.rounds
    .map(
      (r) =>
        `${Math.round(r.ms).toLocaleString('en-US')}${r.steal === undefined ? '' : ` (${r.steal}%)`}`,
    )
    .join(' / ');

async function measure(
  run: BenchRun,
  requests: number,
  jobs: number,
  { latency = latencyMs, rounds = 1 }: { latency?: number; rounds?: number } = {},
): Promise<Measured> {
  const warmUp = warmUpOf(requests);
  const lab = await startLab(run, {
    name: `s2_${jobs}_${latency}`,
    sandbox: {
      consumers: warmUp + rounds * requests,
      rewardsPerConsumer: rewardsPerRequest,
      latencyMs: latency,
    },
    env: { SYNC_CONCURRENCY: String(jobs), PERKS_CONNECTIONS: String(connections) },
  });
  try {
    const ids = await consumerIdsOf(lab.sandbox);
    await syncThroughWorker(run, lab, ids.slice(0, warmUp), warmUp * rewardsPerRequest);
    const listed = async () => (await lab.sandbox.state.counters()).requests.listRewards ?? 0;
    return await inRounds(ids.slice(warmUp), requests, rounds, async (slice) => {
      const before = await listed();
      const timed = await syncThroughWorker(run, lab, slice, slice.length * rewardsPerRequest);
      return { ms: timed.ms, requests: (await listed()) - before };
    });
  } finally {
    await lab.close();
  }
}

/**
 * The floor: each consumer's first page fetched on `connections` connections by a bare loop
 * (as many requests waiting as the worker has syncs in flight), its body read and nothing
 * else done with it.
 */
async function measureBare(requests: number, jobs: number, rounds: number): Promise<Measured> {
  const warmUp = warmUpOf(requests);
  const sandbox = await startRemoteSandbox({
    seed: 1,
    consumers: warmUp + rounds * requests,
    rewardsPerConsumer: rewardsPerRequest,
    latencyMs,
  });
  const pool = new Pool(sandbox.baseUrl, {
    connections,
    headersTimeout: requestTimeoutMs,
    bodyTimeout: requestTimeoutMs,
  });
  try {
    const fetchFirstPage = await firstPageFetcher(sandbox, pool);
    const ids = await consumerIdsOf(sandbox);
    const inFlight = syncsInFlight({ ...defaultWorker, syncConcurrency: jobs });
    const loop = async (slice: readonly string[]) => {
      let next = 0;
      const fetcher = async () => {
        for (let i = next++; i < slice.length; i = next++) {
          const id = slice[i];
          if (id) await fetchFirstPage(id);
        }
      };
      await Promise.all(Array.from({ length: inFlight }, fetcher));
    };
    await loop(ids.slice(0, warmUp));
    return await inRounds(ids.slice(warmUp), requests, rounds, async (slice) => {
      const started = performance.now();
      await loop(slice);
      return { ms: performance.now() - started, requests: slice.length };
    });
  } finally {
    try {
      await pool.destroy();
    } finally {
      await sandbox.close();
    }
  }
}

/**
 * GET of a consumer's first page, as the worker's client asks for it, with a token of the
 * sandbox's; throws on anything but 200.
 */
async function firstPageFetcher(sandbox: RemoteSandbox, pool: Pool) {
  const basic = Buffer.from(`${sandbox.clientId}:${sandbox.clientSecret}`).toString('base64');
  const minted = await pool.request({
    method: 'POST',
    path: '/tokens',
    headers: {
      authorization: `Basic ${basic}`,
      'content-type': 'application/json',
      'x-api-version': '2.0.0',
    },
    body: JSON.stringify({ grant_type: 'client_credentials' }),
  });
  const text = await minted.body.text();
  const token = minted.statusCode === 200 ? accessTokenOf(text) : undefined;
  if (!token) {
    throw new Error(
      `bare HTTP loop: POST /tokens answered ${minted.statusCode}: ${text.slice(0, 200)}`,
    );
  }
  const headers = {
    authorization: `Bearer ${token}`,
    'x-api-version': '2.0.0',
    accept: 'application/json',
  };
  return async (consumerId: string) => {
    const response = await pool.request({
      method: 'GET',
      path: `/perks/consumers/${encodeURIComponent(consumerId)}/rewards?page=1&per_page=1000&sort=-executed_at`,
      headers,
    });
    const body = await response.body.text();
    if (response.statusCode !== 200) {
      throw new Error(`bare HTTP loop: GET answered ${response.statusCode}: ${body.slice(0, 200)}`);
    }
  };
}

export const scenario2: Scenario = {
  id: 2,
  title: 'Latency-bound sync (20 ms per request)',
  async run(ctx: BenchContext): Promise<ScenarioResult> {
    const requests = ctx.quick ? 960 : 3200;
    const rounds = ctx.quick ? 1 : 3;
    const jobs = Math.round(connections * jobsPerConnection);
    const tuned = await measure(ctx.run, requests, jobs, { rounds });
    const plain = await measure(ctx.run, requests, connections);
    const machine = ctx.quick ? undefined : await measure(ctx.run, requests, jobs, { latency: 0 });
    const bare = await measureBare(requests, jobs, rounds);
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
        'rewards per request': rewardsPerRequest,
        'warm-up requests': warmUpOf(requests),
        'rounds (best counts)': rounds,
      },
      figures: {
        'wall ms': Math.round(tuned.ms),
        'wall ms of each round (CPU steal)': describeRounds(tuned),
        'bound Q·L/C ms': Math.round(bound(tuned)),
        'requests/s': Math.round((tuned.requests * 1000) / tuned.ms),
        [`wall ÷ bound with ${connections} jobs`]: round(plain.ms / bound(plain)),
        ...(machine ? { 'wall ms at 0 ms latency': Math.round(machine.ms) } : {}),
        'bare HTTP loop wall ms': Math.round(bare.ms),
        'bare HTTP loop wall ms of each round (CPU steal)': describeRounds(bare),
        'ratio ÷ bare HTTP loop ratio': round(tuned.ms / bound(tuned) / (bare.ms / bound(bare))),
      },
      ratio: round(tuned.ms / bound(tuned)),
      goal: '≤ 1.2',
      extraRatios: {
        ...(machine
          ? {
              Machine: {
                ratio: round(tuned.ms / Math.max(bound(tuned), machine.ms)),
                goal: '≤ 1.2 (wall ÷ the larger of Q·L/C and the same run at 0 ms)',
              },
            }
          : {}),
        Floor: {
          ratio: round(bare.ms / bound(bare)),
          goal: 'none (a bare HTTP loop: wall ÷ Q·L/C, the best this machine allows)',
        },
      },
    };
  },
};

function accessTokenOf(text: string): string | undefined {
  try {
    const token = (JSON.parse(text) as { access_token?: unknown }).access_token;
    return typeof token === 'string' && token !== '' ? token : undefined;
  } catch {
    return undefined;
  }
}
