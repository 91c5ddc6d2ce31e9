/**
 * The `perks-worker work` process itself: SIGTERM finishes active jobs and exits 0; a
 * SIGKILLed replica's job is taken up by another and ends with nothing lost or duplicated.
 */

import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { createServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Producer } from '../../src/queues/producer.js';
import type { Sandbox } from '../../src/sandbox/index.js';
import type { Store } from '../../src/store/store.js';
import {
  expectConsistent,
  type ProcessRig,
  sleep,
  startProcessRig,
  startWorkerProcess,
  storedRewards,
  type WorkerProcess,
  waitFor,
} from '../support/processes.js';
import { startTcpProxy, targetOf } from '../support/tcp-proxy.js';

let rig: ProcessRig;
let sandbox: Sandbox;
let producer: Producer;
let store: Store;

beforeAll(async () => {
  // Slow pages, so that a sync of 6000 rewards (6 pages) is still running when we strike.
  rig = await startProcessRig({ sandbox: { seed: 11, latencyMs: 400 } });
  ({ sandbox, producer, store } = rig);
});

afterAll(() => rig.close());

/** `work` on this file's sandbox, Redis prefix and database; JOB_LOCK_MS short for recovery. */
function startWorker(): WorkerProcess {
  return startWorkerProcess(
    rig.workerEnv({ PERKS_TIMEOUT_MS: '5000', JOB_LOCK_MS: '2000', SHUTDOWN_TIMEOUT_MS: '15000' }),
  );
}

/** Resolves once the job has written at least `pages` pages. */
function pagesWritten(jobId: string, pages: number) {
  return waitFor(`job ${jobId} to write ${pages} pages`, async () => {
    const job = await producer.queues.rewardSync.getJob(jobId);
    const progress = job?.progress as { page?: number } | undefined;
    return (progress?.page ?? 0) >= pages ? true : undefined;
  });
}

/** The lines the process ends with on stderr (`perks-worker: ...`). */
const errorLines = (worker: WorkerProcess) =>
  worker
    .output()
    .split('\n')
    .filter((line) => line.startsWith('perks-worker:'));

/** The ops port a worker logged at start. */
function startedPort(worker: WorkerProcess): number {
  const line = worker
    .output()
    .split('\n')
    .find((l) => l.includes('"worker started"'));
  return (JSON.parse(line ?? '{}') as { port: number }).port;
}

/** A port nothing listens on: connections to it are refused. */
async function closedPort(): Promise<number> {
  const closed = createServer();
  await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
  const { port } = closed.address() as AddressInfo;
  await new Promise((resolve) => closed.close(resolve));
  return port;
}

describe('perks-worker work', () => {
  it('on SIGTERM finishes the active job, closes everything and exits 0', async () => {
    sandbox.state.addConsumer('term_1', { rewards: 6000 });
    const worker = startWorker();
    const { jobId } = await producer.enqueueRewardSync({ consumerId: 'term_1' });
    await pagesWritten(jobId, 1);
    const port = startedPort(worker);
    const ready = await fetch(`http://127.0.0.1:${port}/readyz`);
    expect(ready.status).toBe(200);
    worker.child.kill('SIGTERM');
    // While it finishes the job: no balancer should send it work.
    const draining = await waitFor(
      '/readyz to answer 503',
      async () => {
        const response = await fetch(`http://127.0.0.1:${port}/readyz`);
        return response.status === 503 ? response.json() : undefined;
      },
      10_000,
    );
    expect(draining).toEqual({ status: 'not ready: shutting down' });
    // Still at it (6 pages of 400 ms): the answer came at the drain's start.
    expect(await (await producer.queues.rewardSync.getJob(jobId))?.getState()).toBe('active');
    expect(await worker.exited, worker.output()).toBe(0);
    expect(worker.output()).toContain('"msg":"worker stopped"');
    const job = await producer.queues.rewardSync.getJob(jobId);
    expect(await job?.getState()).toBe('completed');
    await expectConsistent(store.pool, sandbox, ['term_1']);
  });

  it('after a SIGKILL mid-sync, another replica takes the job up; nothing lost or duplicated', async () => {
    sandbox.state.addConsumer('kill_1', { rewards: 6000 });
    const first = startWorker();
    const { jobId } = await producer.enqueueRewardSync({ consumerId: 'kill_1' });
    await pagesWritten(jobId, 2);
    first.child.kill('SIGKILL');
    await first.exited;
    const partial = (await storedRewards(store.pool, 'kill_1')).length;
    expect(partial).toBeGreaterThan(0);
    expect(partial).toBeLessThan(6000);

    const second = startWorker();
    try {
      await waitFor(
        'the job to complete on the second replica',
        async () =>
          (await producer.queues.rewardSync.getJob(jobId))?.finishedOn ? true : undefined,
        30_000,
      );
      const job = await producer.queues.rewardSync.getJob(jobId);
      expect(await job?.getState()).toBe('completed');
      await expectConsistent(store.pool, sandbox, ['kill_1']);
      const { rows } = await store.pool.query<{ n: string }>(
        'select count(*) as n from perks.reward_status_changes where consumer_id = $1',
        ['kill_1'],
      );
      expect(Number(rows[0]?.n)).toBe(0);
    } finally {
      second.child.kill('SIGTERM');
      await second.exited;
    }
  }, 60_000);

  it('on SIGTERM with Redis lost after the start, stops with no job cut short and exits 0', async () => {
    const proxy = await startTcpProxy(targetOf(rig.queues.redisUrl));
    try {
      // The default grace period (30 s): with no job running there is nothing to wait out.
      const worker = startWorkerProcess(
        rig.workerEnv({ REDIS_URL: proxy.urlFor(rig.queues.redisUrl) }),
      );
      await waitFor('worker started', () =>
        worker.output().includes('"worker started"') ? true : undefined,
      );
      proxy.pause(); // Redis down: open connections cut, every reconnect refused
      proxy.cut();
      await waitFor('the lost connection in its log', () =>
        worker.output().includes('redis connection lost') ? true : undefined,
      );
      worker.child.kill('SIGTERM');
      // Each step of the close is bounded: the jobs' grace period, then 5 s at most per store.
      expect(await worker.exited, worker.output()).toBe(0);
      expect(worker.output()).toMatch(/"timedOut":false,.*"msg":"worker stopped"/);
    } finally {
      await proxy.close();
    }
  }, 60_000);

  it('on SIGTERM while PostgreSQL cannot be migrated yet, exits 0 without waiting out the retries; a SIGHUP meanwhile ends nothing', async () => {
    const port = await closedPort();
    const worker = startWorkerProcess(
      rig.workerEnv({ DATABASE_URL: `postgres://postgres@127.0.0.1:${port}/postgres` }),
    );
    await waitFor('a migration retry in its log', () =>
      worker.output().includes('cannot migrate yet') ? true : undefined,
    );
    // A rotation's SIGHUP during the start is no hang-up (with no listener it ends a process).
    worker.child.kill('SIGHUP');
    await sleep(500);
    expect(worker.alive(), worker.output()).toBe(true);
    worker.child.kill('SIGTERM');
    // The retries go on for a minute; the stop must not wait for them.
    expect(await worker.exited, worker.output()).toBe(0);
    expect(worker.output()).toContain('stopped before the worker started');
  }, 30_000);

  it('on SIGTERM during a start-up mint that has not answered, says the mint was not awaited', async () => {
    // An API that takes the connection and never answers: the mint waits out PERKS_TIMEOUT_MS.
    const held: Socket[] = [];
    const silent = createServer((socket) => held.push(socket));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    try {
      const { port } = silent.address() as AddressInfo;
      const worker = startWorkerProcess(
        rig.workerEnv({ PERKS_BASE_URL: `http://127.0.0.1:${port}`, PERKS_TIMEOUT_MS: '20000' }),
      );
      await waitFor('the mint to reach the API', () => (held.length > 0 ? true : undefined));
      worker.child.kill('SIGTERM');
      expect(await worker.exited, worker.output()).toBe(0);
      const started = worker
        .output()
        .split('\n')
        .find((l) => l.includes('"worker started"'));
      expect(JSON.parse(started ?? '{}')).toMatchObject({ perksApi: 'stopping: mint not awaited' });
    } finally {
      for (const socket of held) socket.destroy();
      await new Promise((resolve) => silent.close(resolve));
    }
  }, 30_000);

  it('a SIGHUP while `work` still loads its modules ends nothing, and is read once it runs', async () => {
    // A loader hook sends it as the worker's own modules load (the command's module is imported
    // lazily, after the command line's): the window before `work` itself runs.
    const dir = await mkdtemp(join(tmpdir(), 'perks-hup-'));
    const hooks = pathToFileURL(join(dir, 'hooks.mjs')).href;
    await writeFile(
      join(dir, 'hooks.mjs'),
      `export async function load(url, context, next) {
        if (url.endsWith('/src/app.js')) {
          process.kill(process.pid, 'SIGHUP');
          await new Promise((resolve) => setTimeout(resolve, 200));
        }
        return next(url, context);
      }`,
    );
    await writeFile(
      join(dir, 'register.mjs'),
      `import { register } from 'node:module'; register(${JSON.stringify(hooks)});`,
    );
    const register = pathToFileURL(join(dir, 'register.mjs')).href;
    const worker = startWorkerProcess(rig.workerEnv({ NODE_OPTIONS: `--import=${register}` }));
    try {
      const read = () => worker.output().includes('credentials are variables');
      await waitFor('the SIGHUP read, or the worker gone', () =>
        read() || !worker.alive() ? true : undefined,
      );
      expect(worker.alive(), worker.output()).toBe(true);
      expect(worker.output()).toContain('"worker started"');
      expect(await worker.stop(), worker.output()).toBe(0);
    } finally {
      await worker.stop();
      await rm(dir, { recursive: true, force: true });
    }
  }, 30_000);

  it.each([
    ['PORT', {}],
    ['INTAKE_PORT', { INTAKE_TOKEN: 'a-token-of-at-least-24-characters' }],
  ])('exits 1 with one line when %s is taken, before taking any job', async (variable, extra) => {
    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    const port = (taken.address() as AddressInfo).port;
    try {
      const consumerId = `port_${variable.toLowerCase()}`;
      sandbox.state.addConsumer(consumerId, { rewards: 3 });
      const { jobId } = await producer.enqueueRewardSync({ consumerId });
      const worker = startWorkerProcess(rig.workerEnv({ ...extra, [variable]: String(port) }));
      expect(await worker.exited, worker.output()).toBe(1);
      expect(errorLines(worker)).toEqual([
        `perks-worker: ${variable} ${port} is already in use; give each replica on a host its own ${variable}`,
      ]);
      const state = await (await producer.queues.rewardSync.getJob(jobId))?.getState();
      expect(['waiting', 'prioritized']).toContain(state);
    } finally {
      taken.close();
    }
  });

  it.each([
    ['OPS_HOST', {}],
    ['INTAKE_HOST', { INTAKE_TOKEN: 'a-token-of-at-least-24-characters' }],
  ])('exits 1 with one line when %s is no address of this host', async (variable, extra) => {
    // 192.0.2.1: TEST-NET-1, documentation only, never this machine's.
    const worker = startWorkerProcess(rig.workerEnv({ ...extra, [variable]: '192.0.2.1' }));
    expect(await worker.exited, worker.output()).toBe(1);
    expect(errorLines(worker)).toEqual([
      `perks-worker: ${variable} 192.0.2.1 cannot be listened on (EADDRNOTAVAIL): give an address of this host, such as 0.0.0.0 (every interface) or 127.0.0.1`,
    ]);
  });
});
