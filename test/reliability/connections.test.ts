/**
 * Redis and PostgreSQL connections cut or down mid-run, through a TCP proxy in front of each
 * (the machine's shared services are never touched). The `work` process must neither exit
 * nor stop consuming: jobs wait, resume, and end with the datastore equal to the sandbox.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Producer } from '../../src/queues/producer.js';
import type { Sandbox } from '../../src/sandbox/index.js';
import type { Store } from '../../src/store/store.js';
import type { TestDatabase } from '../support/database.js';
import {
  expectConsistent,
  type ProcessRig,
  sleep,
  startProcessRig,
  startWorkerProcess,
  type WorkerProcess,
  waitFor,
} from '../support/processes.js';
import { startTcpProxy, type TcpProxy, targetOf } from '../support/tcp-proxy.js';

let rig: ProcessRig;
let queues: ProcessRig['queues'];
let db: TestDatabase;
let sandbox: Sandbox;
let producer: Producer;
let store: Store;
let redisProxy: TcpProxy;
let pgProxy: TcpProxy;
let worker: WorkerProcess | undefined;

beforeAll(async () => {
  rig = await startProcessRig({
    // Slow pages, so a cut lands while syncs are running.
    sandbox: { seed: 21, latencyMs: 150 },
    jobPolicy: {
      jobAttempts: 30,
      jobBackoffMs: 200,
      keepCompletedJobs: 10_000,
      keepFailedJobs: 10_000,
    },
  });
  ({ queues, db, sandbox, producer, store } = rig);
  redisProxy = await startTcpProxy(targetOf(queues.redisUrl));
  pgProxy = await startTcpProxy(targetOf(db.url));
});

afterEach(async () => {
  redisProxy.resume();
  pgProxy.resume();
  await worker?.stop('SIGKILL');
  worker = undefined;
});

afterAll(async () => {
  await redisProxy.close();
  await pgProxy.close();
  await rig.close();
});

function startProxiedWorker(env: Record<string, string> = {}): WorkerProcess {
  return startWorkerProcess(
    rig.workerEnv({
      PERKS_TIMEOUT_MS: '3000',
      REDIS_URL: redisProxy.urlFor(queues.redisUrl),
      DATABASE_URL: pgProxy.urlFor(db.url),
      DATABASE_POOL_SIZE: '4',
      SYNC_CONCURRENCY: '4',
      JOB_ATTEMPTS: '30',
      JOB_BACKOFF_MS: '200',
      JOB_LOCK_MS: '4000',
      SHUTDOWN_TIMEOUT_MS: '3000',
      ...env,
    }),
  );
}

async function enqueueSyncs(ids: readonly string[]): Promise<string[]> {
  const jobIds: string[] = [];
  for (const consumerId of ids) {
    jobIds.push((await producer.enqueueRewardSync({ consumerId, reason: 'manual' })).jobId);
  }
  return jobIds;
}

async function completedCount(jobIds: readonly string[]): Promise<number> {
  let done = 0;
  for (const id of jobIds) {
    const job = await producer.queues.rewardSync.getJob(id);
    if (job && (await job.getState()) === 'completed') done++;
  }
  return done;
}

function allCompleted(jobIds: readonly string[], timeoutMs = 60_000) {
  return waitFor(
    `${jobIds.length} sync jobs to complete`,
    async () => ((await completedCount(jobIds)) === jobIds.length ? true : undefined),
    timeoutMs,
    200,
  );
}

/** Resolves once a page of a consumer whose id starts with `prefix` is stored. */
function firstPageWritten(prefix: string) {
  const sql = 'select 1 from perks.rewards where consumer_id like $1 limit 1';
  return waitFor('a first page written', async () =>
    (await store.pool.query(sql, [`${prefix}_%`])).rowCount ? true : undefined,
  );
}

function seed(prefix: string, count: number, rewards: number): string[] {
  const ids = Array.from({ length: count }, (_, i) => `${prefix}_${i}`);
  for (const id of ids) sandbox.state.addConsumer(id, { rewards });
  return ids;
}

describe('Redis connection faults', () => {
  it('keeps running through Redis cuts and a 3 s outage; every job completes, nothing lost', async () => {
    const ids = seed('redis_cut', 8, 1500);
    worker = startProxiedWorker();
    const w = worker;
    const jobIds = await enqueueSyncs(ids);
    await waitFor('a first page written', async () =>
      (await store.pool.query('select 1 from perks.rewards limit 1')).rowCount ? true : undefined,
    );

    redisProxy.cut();
    await sleep(300);
    redisProxy.pause(); // Redis down: every reconnect is refused
    await sleep(3000);
    expect(w.alive(), w.output()).toBe(true);
    redisProxy.resume();
    await sleep(500);
    redisProxy.cut();

    await allCompleted(jobIds);
    expect(w.alive(), w.output()).toBe(true);
    expect(redisProxy.stats().cuts).toBe(3);
    expect(w.output()).toContain('redis connection lost');

    // Still consuming after the outage: a job enqueued now completes too.
    const [late] = seed('redis_late', 1, 10);
    await allCompleted(await enqueueSyncs([late ?? '']));
    await expectConsistent(store.pool, sandbox, [...ids, late ?? '']);
    expect(await producer.queues.rewardSync.getFailedCount()).toBe(0);
  }, 90_000);
});

describe('PostgreSQL connection faults', () => {
  it('keeps running through Postgres cuts and a 3 s outage; every job completes, nothing lost', async () => {
    const ids = seed('pg_cut', 8, 1500);
    worker = startProxiedWorker();
    const w = worker;
    const jobIds = await enqueueSyncs(ids);
    await firstPageWritten('pg_cut');

    pgProxy.cut(); // queries in flight fail; the pool opens new connections
    await sleep(300);
    pgProxy.pause(); // Postgres down
    await sleep(3000);
    expect(w.alive(), w.output()).toBe(true);
    pgProxy.resume();
    await sleep(500);
    pgProxy.cut();

    await allCompleted(jobIds);
    expect(w.alive(), w.output()).toBe(true);

    const [late] = seed('pg_late', 1, 10);
    await allCompleted(await enqueueSyncs([late ?? '']));
    await expectConsistent(store.pool, sandbox, [...ids, late ?? '']);
    expect(await producer.queues.rewardSync.getFailedCount()).toBe(0);
  }, 90_000);

  it("an outage longer than the jobs' attempts fails none: they wait, spending none, the API left alone", async () => {
    const ids = seed('pg_long', 4, 1500);
    // Spent on the outage, 2 attempts 100 ms apart would be gone in well under a second.
    worker = startProxiedWorker({ JOB_ATTEMPTS: '2', JOB_BACKOFF_MS: '100' });
    const w = worker;
    const jobIds = await enqueueSyncs(ids);
    const enrolled = await producer.enqueueEnrollment({ consumerId: 'pg_long_enroll' });
    await firstPageWritten('pg_long');
    pgProxy.pause();
    await waitFor('the pause', () =>
      w.output().includes('postgres unreachable; this replica takes no job') ? true : undefined,
    );
    await sleep(1000); // the jobs in flight have met it and gone back to wait
    const requestsAt = () => {
      const { requests } = sandbox.state.counters();
      return (requests.listRewards ?? 0) + (requests.enrollConsumer ?? 0);
    };
    const before = requestsAt();
    await sleep(4000);
    expect(requestsAt() - before, 'API requests while paused').toBe(0);
    expect(w.alive(), w.output()).toBe(true);
    pgProxy.resume();

    await allCompleted(jobIds);
    await waitFor('the enrollment', async () => {
      const job = await producer.queues.enrollment.getJob(enrolled.jobId);
      return (await job?.getState()) === 'completed' ? true : undefined;
    });
    expect(w.output()).toContain('postgres answers again; the jobs resume');
    for (const id of jobIds) {
      // Completed on their first counted attempt: the outage spent none.
      expect((await producer.queues.rewardSync.getJob(id))?.attemptsMade, id).toBe(1);
    }
    await expectConsistent(store.pool, sandbox, ids);
    expect(await producer.queues.rewardSync.getFailedCount()).toBe(0);
    expect(await producer.queues.enrollment.getFailedCount()).toBe(0);
  }, 90_000);

  it('starts while Postgres is down and begins consuming once it is back', async () => {
    const ids = seed('pg_start', 2, 20);
    pgProxy.pause();
    worker = startProxiedWorker();
    const w = worker;
    const jobIds = await enqueueSyncs(ids);
    await sleep(2500);
    expect(w.alive(), w.output()).toBe(true);
    expect(await completedCount(jobIds)).toBe(0);
    pgProxy.resume();
    await allCompleted(jobIds).catch((e) => {
      throw new Error(`${e}\n${w.output().slice(-3000)}`);
    });
    await expectConsistent(store.pool, sandbox, ids);
  }, 90_000);
});
