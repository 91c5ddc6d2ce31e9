/**
 * `perks-worker failed` with the built bin: a job that failed permanently (its payload) is marked
 * so and skipped by --retry, which retries one that failed for a passing cause (a 503).
 */
import { Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { enrollmentJobId, jobNames, queueNames } from '../../src/queues/names.js';
import {
  type ProcessRig,
  runCli,
  startProcessRig,
  startWorkerProcess,
  type WorkerProcess,
  waitFor,
} from '../support/processes.js';

let rig: ProcessRig;
let worker: WorkerProcess;

beforeAll(async () => {
  rig = await startProcessRig({ sandbox: { seed: 3 } });
});

afterAll(async () => {
  await worker?.stop('SIGKILL');
  await rig?.close();
});

interface FailedJson {
  jobs: { consumer: string; attempts: number; permanent: boolean; reason: string }[];
  retried: number;
  skipped: number;
}

describe('perks-worker failed', () => {
  it('marks a permanent failure, and --retry skips it while it retries a passing one', async () => {
    const env = rig.workerEnv({ JOB_ATTEMPTS: '1' });
    rig.sandbox.faults.inject({
      route: 'enroll',
      consumerId: 'fr_flaky',
      kind: 'status',
      status: 503,
      count: 100,
    });
    expect((await runCli(['enroll', 'fr_flaky'], env)).status).toBe(0);
    // A payload no worker accepts, as an older producer might have added it.
    const payload = {
      userId: 'fr_bad',
      consumerId: 'fr_bad',
      extraConsents: ['BASIC'],
      removedConsents: ['BASIC'],
    };
    const bad = await rig.producer.queues.enrollment.add(jobNames.enroll, payload, {
      jobId: enrollmentJobId('fr_bad'),
    });
    worker = startWorkerProcess(env);
    await waitFor('both jobs failed', async () =>
      (await rig.producer.queues.enrollment.getFailedCount()) === 2 ? true : undefined,
    );

    const listed = await runCli(['failed'], env);
    expect(listed.stdout).toMatch(
      /^enrollment +enroll-fr_bad-\S+ +fr_bad +1 +\S+ +permanent +invalid enrollment payload: removedConsents: /m,
    );
    expect(listed.stdout).toMatch(
      /^enrollment +enroll-fr_flaky-\S+ +fr_flaky +1 +\S+ +retryable +enrollConsumer: HTTP 503 /m,
    );

    // A webhook delivery that failed: its consumer's events are the dispatcher's to send again.
    const { webhooks } = rig.producer.queues;
    const hook = await webhooks.add('deliver-events', { consumerId: 'fr_hook' }, { attempts: 1 });
    const connection = new Redis(env.REDIS_URL ?? '', { maxRetriesPerRequest: null });
    const failing = new Worker(
      queueNames.webhooks,
      async () => {
        throw new Error('receiver away');
      },
      { connection, prefix: env.QUEUE_PREFIX ?? '' },
    );
    await waitFor('the delivery failed', async () =>
      (await hook.getState()) === 'failed' ? true : undefined,
    );
    await failing.close();
    connection.disconnect();

    rig.sandbox.faults.clear();
    const retry = await runCli(['failed', '--retry', '--json'], env);
    const json = JSON.parse(retry.stdout) as FailedJson;
    expect(json).toMatchObject({ retried: 1, skipped: 2 });
    expect(json.jobs.map((j) => [j.consumer, j.permanent]).sort()).toEqual([
      ['fr_bad', true],
      ['fr_flaky', false],
      ['fr_hook', false],
    ]);
    expect(await hook.getState()).toBe('failed');
    // The 503s are over: the retried job enrolls; the other is still failed, not run again.
    await waitFor('fr_flaky enrolled', () =>
      rig.sandbox.state.isEnrolled('fr_flaky') ? true : undefined,
    );
    expect(await bad.getState()).toBe('failed');
    expect((await rig.producer.queues.enrollment.getJob(bad.id ?? ''))?.attemptsMade).toBe(1);

    // A failed reconciliation: BullMQ would retry it outside its deduplication, beside a new one.
    expect(await worker.stop()).toBe(0);
    const { reconciliation } = rig.producer.queues;
    const fanOut = await reconciliation.add(jobNames.reconcile, {}, { attempts: 1 });
    const fanOutConnection = new Redis(env.REDIS_URL ?? '', { maxRetriesPerRequest: null });
    const failingFanOut = new Worker(
      queueNames.reconciliation,
      async () => {
        throw new Error('connection terminated');
      },
      { connection: fanOutConnection, prefix: env.QUEUE_PREFIX ?? '' },
    );
    await waitFor('the reconciliation failed', async () =>
      (await fanOut.getState()) === 'failed' ? true : undefined,
    );
    await failingFanOut.close();
    fanOutConnection.disconnect();

    const again = await runCli(['failed', '--retry'], env);
    expect(again.stdout).toMatch(
      /\nretried 0 job\(s\); skipped 3 that failed permanently \(retrying cannot help: fix the cause and enqueue them again\), deliver webhooks \(their events are sent again by the dispatcher\) or reconcile \(run `perks-worker reconcile`\)\n$/,
    );
    expect(await fanOut.getState()).toBe('failed');
  }, 60_000);
});
