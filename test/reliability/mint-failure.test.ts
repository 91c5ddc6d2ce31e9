/**
 * A wrong client secret, met as an operator meets it: the real `work` process says so at
 * start (an error line, /readyz, `status`), takes no job and spends no attempt while minting
 * fails, backs its mints off, and resumes at once when restarted with the right secret. Beside
 * a replica with the right secret, it stops nobody but itself; so does one whose token endpoint
 * fails for it alone (a wrong PERKS_BASE_URL).
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  bin,
  type ProcessRig,
  sleep,
  startProcessRig,
  startWorkerProcess,
  type WorkerProcess,
  waitFor,
} from '../support/processes.js';

let rig: ProcessRig;
const workers: WorkerProcess[] = [];

beforeAll(async () => {
  rig = await startProcessRig({ sandbox: { seed: 51, rewardsOnEnroll: 4 } });
});

afterAll(async () => {
  for (const worker of workers) await worker.stop('SIGKILL');
  await rig?.close();
});

function start(env: Record<string, string> = {}): WorkerProcess {
  const worker = startWorkerProcess(rig.workerEnv(env));
  workers.push(worker);
  return worker;
}

/** The parsed log lines of a worker whose `msg` contains `text`. */
function logLines(worker: WorkerProcess, text: string): Record<string, unknown>[] {
  return worker
    .output()
    .split('\n')
    .filter((line) => line.startsWith('{') && line.includes(text))
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

async function startedPort(worker: WorkerProcess): Promise<number> {
  return waitFor('worker started', async () => {
    const [line] = logLines(worker, '"worker started"');
    return line ? (line.port as number) : undefined;
  });
}

async function status(): Promise<string> {
  const { stdout } = await promisify(execFile)(process.execPath, [bin, 'status'], {
    env: { PATH: process.env.PATH ?? '', ...rig.workerEnv() },
  }).catch((error: { stdout: string }) => error);
  return stdout;
}

describe('a token mint that fails', () => {
  it('shows at once, pauses the jobs without spending attempts, and resumes once minting works', async () => {
    const enrollment = await rig.producer.enqueueEnrollment({ consumerId: 'mint_enroll' });
    rig.sandbox.state.addConsumer('mint_sync', { rewards: 3 });
    const sync = await rig.producer.enqueueRewardSync({ consumerId: 'mint_sync' });

    const wrong = start({ PERKS_CLIENT_SECRET: 'sk_sandbox_not_the_secret' });
    const port = await startedPort(wrong);
    const [failure] = logLines(wrong, 'cannot mint a token');
    expect(failure).toMatchObject({ level: 50, reason: '401 ERR-401-00' });
    expect(wrong.output()).not.toContain('sk_sandbox_not_the_secret');

    const ready = await fetch(`http://127.0.0.1:${port}/readyz`);
    expect(ready.status).toBe(503);
    expect(await ready.json()).toEqual({
      status: 'not ready: perks api: credentials refused (401 ERR-401-00)',
      checks: { redis: 'ok', postgres: 'ok', 'perks api': 'credentials refused (401 ERR-401-00)' },
    });
    const shown = await status();
    const [first] = shown.split('\n');
    expect(first).toMatch(
      /^perks api: TOKEN MINT REFUSED for client sandbox-client since \S+ \(401 ERR-401-00: .*\); the replicas holding these credentials take no API job, next try \S+$/,
    );
    // The queues are not paused: a replica with the right secret would work.
    expect(shown).not.toContain('API queues paused');

    // Mints at about 0, 1, 3 and 7 s: a doubling backoff, not a storm.
    await sleep(5000);
    const counters = rig.sandbox.state.counters();
    expect(counters.requests.token).toBeGreaterThanOrEqual(2);
    expect(counters.requests.token).toBeLessThanOrEqual(5);
    const again = logLines(wrong, 'token mint still failing').length;
    expect(again).toBeGreaterThanOrEqual(1);
    // Each mint is the end-of-pause one, which logs (one more may be in flight): no job mints.
    expect(counters.requests.token).toBeLessThanOrEqual(1 + again + 1);
    // No job reached the API, and none spent an attempt.
    expect(counters.requests.enroll ?? 0).toBe(0);
    expect(counters.requests.listRewards ?? 0).toBe(0);
    const { enrollment: enrollQueue, rewardSync } = rig.producer.queues;
    for (const job of [
      await enrollQueue.getJob(enrollment.jobId),
      await rewardSync.getJob(sync.jobId),
    ]) {
      expect(await job?.getState()).toBe('waiting');
      expect(job?.attemptsMade).toBe(0);
    }
    expect(await wrong.stop()).toBe(0);

    // Restarted with the right secret: its first mint lifts the pause the other one left.
    const right = start();
    const rightPort = await startedPort(right);
    await waitFor('both jobs completed', async () => {
      const states = await Promise.all([
        enrollQueue.getJobState(enrollment.jobId),
        rewardSync.getJobState(sync.jobId),
      ]);
      return states.every((s) => s === 'completed') ? true : undefined;
    });
    expect((await enrollQueue.getJob(enrollment.jobId))?.attemptsMade).toBe(1);
    expect((await rewardSync.getJob(sync.jobId))?.attemptsMade).toBe(1);
    expect((await fetch(`http://127.0.0.1:${rightPort}/readyz`)).status).toBe(200);
    expect(await status()).not.toContain('TOKEN MINT');
    expect(await right.stop()).toBe(0);
  }, 60_000);

  it('a token cached by a process with the right secret is not used by one with a wrong secret', async () => {
    const right = start();
    await startedPort(right); // its start-up mint caches the token in Redis
    const { connection, queues } = rig.producer;
    const prefix = rig.workerEnv().QUEUE_PREFIX;
    expect(await connection.keys(`${prefix}:perks:token:*`)).not.toHaveLength(0);
    expect(await right.stop()).toBe(0);

    const wrong = start({ PERKS_CLIENT_SECRET: 'sk_sandbox_wrong_after_right' });
    await startedPort(wrong);
    const enrollsBefore = rig.sandbox.state.counters().requests.enroll ?? 0;
    const enrollment = await rig.producer.enqueueEnrollment({ consumerId: 'mint_cached' });
    // Past the first pauses (1, 2 and 4 s): the jobs run, and must mint for themselves.
    await sleep(9000);
    expect(logLines(wrong, 'cannot mint a token')).toHaveLength(1);
    expect(await queues.enrollment.getJobState(enrollment.jobId)).toBe('waiting');
    expect(rig.sandbox.state.counters().requests.enroll ?? 0).toBe(enrollsBefore);
    expect(await wrong.stop()).toBe(0);
  }, 60_000);

  it('a replica with a wrong secret beside one with the right: the right works on, each says what it does', async () => {
    const right = start();
    const rightPort = await startedPort(right);
    const wrong = start({ PERKS_CLIENT_SECRET: 'sk_sandbox_wrong_beside_right' });
    const wrongPort = await startedPort(wrong);
    const { enrollment: enrollQueue } = rig.producer.queues;
    // Enqueued while the wrong one fails its mints: the right one takes them all.
    for (const consumerId of ['mint_beside_1', 'mint_beside_2']) {
      const { jobId } = await rig.producer.enqueueEnrollment({ consumerId });
      await waitFor(`${consumerId} enrolled`, async () =>
        (await enrollQueue.getJobState(jobId)) === 'completed' ? true : undefined,
      );
      await waitFor('another refused mint', () =>
        logLines(wrong, 'token mint still failing').length > 0 ? true : undefined,
      );
    }
    const readyz = async (port: number) => {
      const answer = await fetch(`http://127.0.0.1:${port}/readyz`);
      return {
        status: answer.status,
        perksApi: ((await answer.json()) as Checks).checks['perks api'],
      };
    };
    expect(await readyz(rightPort)).toEqual({ status: 200, perksApi: 'ok' });
    expect(await readyz(wrongPort)).toEqual({
      status: 503,
      perksApi: 'credentials refused (401 ERR-401-00)',
    });
    const lines = (await status()).split('\n');
    expect(lines[0]).toMatch(/^perks api: TOKEN MINT REFUSED for client sandbox-client since /);
    expect(lines.join('\n')).not.toContain('API queues paused');
    expect(await wrong.stop()).toBe(0);
    expect(await right.stop()).toBe(0);
  }, 60_000);
});

it('a replica whose token endpoint fails for it alone (a wrong base URL) stops nobody else', async () => {
  const right = start();
  const rightPort = await startedPort(right);
  const misrouted = start({ PERKS_BASE_URL: `${rig.workerEnv().PERKS_BASE_URL}/typo` });
  const misroutedPort = await startedPort(misrouted);
  expect(logLines(misrouted, 'cannot mint a token')[0]).toMatchObject({
    reason: '404 ERR-404-00',
  });
  const { enrollment: enrollQueue } = rig.producer.queues;
  for (const consumerId of ['misrouted_beside_1', 'misrouted_beside_2']) {
    const { jobId } = await rig.producer.enqueueEnrollment({ consumerId });
    await waitFor(`${consumerId} enrolled`, async () =>
      (await enrollQueue.getJobState(jobId)) === 'completed' ? true : undefined,
    );
  }
  const perksApi = async (port: number) =>
    ((await (await fetch(`http://127.0.0.1:${port}/readyz`)).json()) as Checks).checks['perks api'];
  expect(await perksApi(rightPort)).toBe('ok');
  expect(await perksApi(misroutedPort)).toBe('token mint failing (404 ERR-404-00)');
  expect((await status()).split('\n')[0]).toMatch(
    /^perks api: TOKEN MINT FAILING for client sandbox-client since \S+ \(404 ERR-404-00: .*\); the replicas meeting it take no API job, next try /,
  );
  expect(await misrouted.stop()).toBe(0);
  expect(await right.stop()).toBe(0);
}, 60_000);

type Checks = { checks: Record<string, string> };
