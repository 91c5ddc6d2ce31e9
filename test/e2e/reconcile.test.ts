/** Reconciliation end to end: every enrolled consumer re-synced, with a bounded backlog. */
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { startPerksWorker } from '../../src/app.js';
import { lastReconciliation } from '../../src/queues/inspect.js';
import { queueNames } from '../../src/queues/names.js';
import type { PerksJob } from '../../src/queues/payloads.js';
import { enqueueRewardSyncs, rewardSyncJob } from '../../src/queues/producer.js';
import { processReconcileTick, startReconciliation } from '../../src/reconciliation/index.js';
import { readTally, type Tally } from '../../src/reconciliation/tally.js';
import { sleep, waitFor } from '../support/processes.js';
import { type Harness, startHarness } from '../support/worker-harness.js';

let harness: Harness | undefined;
afterEach(async () => {
  await harness?.close();
  harness = undefined;
});

async function seedConsumers(h: Harness, count: number): Promise<string[]> {
  const ids = Array.from({ length: count }, (_, i) => `rc_${String(i).padStart(4, '0')}`);
  for (const id of ids) {
    h.sandbox.state.addConsumer(id, { rewards: 2 });
    await h.runtime.ctx.store.recordEnrollment({
      consumerId: id,
      outcome: 'created',
      extraConsents: [],
      removedConsents: [],
      at: new Date(),
    });
  }
  return ids;
}

/** Every answer about the consumer's rewards has the wrong shape: it is not retried, it fails. */
function failEveryListing(h: Harness, consumerId: string): void {
  h.sandbox.faults.inject({
    route: 'listRewards',
    consumerId,
    count: 100,
    kind: 'malformed',
    body: 'wrong-shape',
  });
}

/** Runs a reconciliation and returns its tally once finished (the last failure is counted just
 * after its job failed, so it is polled for). */
async function reconcileToTheEnd(h: Harness): Promise<Tally> {
  const { jobId } = await startReconciliation(h.runtime.ctx.queues);
  await h.idle(30_000);
  return waitFor('the tally to finish', async () => {
    const read = await readTally(h.runtime.ctx.tallies, jobId);
    return read.finishedAt ? read : undefined;
  });
}

describe('reconciliation', () => {
  it('re-syncs every enrolled consumer while the sync backlog stays bounded', async () => {
    harness = await startHarness({
      sandbox: { latencyMs: 5 },
      env: { SYNC_CONCURRENCY: '2', RECONCILE_BATCH_SIZE: '25', RECONCILE_MAX_PENDING: '5' },
    });
    const h = harness;
    const ids = await seedConsumers(h, 300);
    // One consumer marked not enrolled is skipped.
    await h.runtime.ctx.store.markNotEnrolled({ consumerId: 'rc_0000', at: new Date() });

    let peak = 0;
    let watching = true;
    const watcher = (async () => {
      while (watching) {
        const c = await h.runtime.ctx.queues.rewardSync.getJobCounts(
          'wait',
          'prioritized',
          'delayed',
        );
        peak = Math.max(peak, (c.wait ?? 0) + (c.prioritized ?? 0) + (c.delayed ?? 0));
        await new Promise((r) => setTimeout(r, 20));
      }
    })();

    const first = await startReconciliation(h.runtime.ctx.queues);
    const second = await startReconciliation(h.runtime.ctx.queues);
    const tick = await processReconcileTick(h.runtime.ctx);
    expect(first.started).toBe(true);
    expect(second).toEqual({ jobId: first.jobId, started: false });
    expect(tick.started).toBe(false);

    await h.idle(60_000);
    watching = false;
    await watcher;

    const job = await h.runtime.ctx.queues.reconciliation.getJob(first.jobId);
    expect(job?.returnvalue).toMatchObject({ enqueued: 299 });
    // Under the bound, then one read batch: 25 consumers in jobs of 8, 8, 8 and 1.
    expect(peak).toBeLessThanOrEqual(5 + 4);
    expect(peak).toBeGreaterThanOrEqual(5); // the bound was reached: backpressure engaged
    const { rows } = await h.runtime.ctx.store.pool.query<{ n: string }>(
      'select count(*) as n from perks.rewards',
    );
    expect(Number(rows[0]?.n)).toBe((ids.length - 1) * 2);
    // One sync per consumer: no doubled work.
    expect(h.sandbox.state.counters().requests.listRewards).toBe(299);
    // 8 consumers to a job: each read batch of 25 makes jobs of 8, 8, 8 and 1; the last, of
    // 24, makes 3 of 8.
    const completed = await h.runtime.ctx.queues.rewardSync.getJobs(['completed']);
    expect(completed.length).toBe(11 * 4 + 3);
    const tally = await readTally(h.runtime.ctx.tallies, first.jobId);
    expect(tally).toMatchObject({
      expected: 299,
      total: 299,
      synced: 299,
      notEnrolled: 0,
      failed: 0,
    });
    expect(Date.parse(tally.finishedAt ?? '')).toBeGreaterThan(
      Date.parse(job?.data.startedAt ?? ''),
    );
  });

  it("tallies each consumer's outcome: synced, not enrolled upstream, failed for good", async () => {
    harness = await startHarness({ env: { RECONCILE_BATCH_SIZE: '10', JOB_BACKOFF_MS: '10' } });
    const h = harness;
    const ids = await seedConsumers(h, 20);
    // Enrolled here, unknown upstream: ERR-404-02.
    await h.runtime.ctx.store.recordEnrollment({
      consumerId: 'rc_gone',
      outcome: 'created',
      extraConsents: [],
      removedConsents: [],
      at: new Date(),
    });
    failEveryListing(h, 'rc_0007');
    const tally = await reconcileToTheEnd(h);
    expect(tally).toMatchObject({ expected: ids.length + 1, total: ids.length + 1 });
    expect(tally).toMatchObject({ synced: 19, notEnrolled: 1, failed: 1 });
    expect(tally.finishedAt).toBeDefined();
  });

  it('counts a consumer left to its own pending sync job by that job, even when it fails', async () => {
    harness = await startHarness({
      env: { RECONCILE_BATCH_SIZE: '10', JOB_ATTEMPTS: '2', JOB_BACKOFF_MS: '10' },
    });
    const h = harness;
    await seedConsumers(h, 10);
    // rc_0005 has a sync job of its own, due in a moment; every answer about it is malformed.
    const own = rewardSyncJob({ consumerId: 'rc_0005', reason: 'manual' });
    await h.runtime.ctx.queues.rewardSync.add(own.name, own.data, { ...own.opts, delay: 800 });
    failEveryListing(h, 'rc_0005');
    const tally = await reconcileToTheEnd(h);
    expect(tally).toMatchObject({ total: 10, synced: 9, notEnrolled: 0, failed: 1 });
  });

  it('fans out one consumer a job while PERKS_RATE_LIMIT_PER_SECOND is set', async () => {
    harness = await startHarness({
      env: { PERKS_RATE_LIMIT_PER_SECOND: '1000', RECONCILE_BATCH_SIZE: '10' },
    });
    const h = harness;
    const ids = await seedConsumers(h, 12);
    await startReconciliation(h.runtime.ctx.queues);
    await h.idle(30_000);
    const completed = await h.runtime.ctx.queues.rewardSync.getJobs(['completed']);
    const consumersOf = (j: { data: unknown }) => (j.data as { consumerIds: string[] }).consumerIds;
    expect(completed.every((j) => consumersOf(j).length === 1)).toBe(true);
    expect(completed.flatMap(consumersOf).sort()).toEqual(ids);
  });

  it('a reconciliation cut short by three shutdowns in a row spends no attempt', async () => {
    harness = await startHarness({
      env: { RECONCILE_MAX_PENDING: '1', SHUTDOWN_TIMEOUT_MS: '300' },
    });
    const h = harness;
    await seedConsumers(h, 3);
    // A backlog over RECONCILE_MAX_PENDING (delayed syncs, as after a 429) keeps the fan-out
    // waiting for room, as a long one does, until the shutdown's grace period cancels it.
    const { rewardSync } = h.runtime.ctx.queues;
    for (const consumerId of ['rc_backlog_1', 'rc_backlog_2'])
      await rewardSync.add('sync-rewards', { consumerId }, { delay: 3_600_000 });
    const { jobId } = await startReconciliation(h.runtime.ctx.queues);
    // Its own connection: each shutdown closes the app's.
    const connection = new Redis(h.config.redis.url, { maxRetriesPerRequest: null });
    const reconciliation = new Queue(queueNames.reconciliation, { connection, prefix: h.prefix });
    const logger = pino({ level: 'silent' });
    try {
      for (let deploy = 1; deploy <= 3; deploy++) {
        await waitFor('the reconciliation to run', async () =>
          (await reconciliation.getJobState(jobId)) === 'active' ? true : undefined,
        );
        await sleep(200);
        await h.app.close();
        h.app = await startPerksWorker(h.config, { logger });
      }
      const job = await reconciliation.getJob(jobId);
      expect(await job?.getState()).not.toBe('failed');
      expect(job?.attemptsMade).toBe(0);
    } finally {
      await reconciliation.close();
      connection.disconnect();
    }
  }, 60_000);

  it('resumes after the cursor saved in the job', async () => {
    harness = await startHarness({ env: { RECONCILE_BATCH_SIZE: '10' } });
    const h = harness;
    await seedConsumers(h, 30);
    await h.worker.close(1000); // nothing runs the job until we say so
    const { jobId } = await startReconciliation(h.runtime.ctx.queues);
    const job = await h.runtime.ctx.queues.reconciliation.getJob(jobId);
    // As a replica that died after enqueueing the first 20 would have left it; it had also
    // enqueued the next 10, but died before saving the cursor after them.
    await job?.updateData({ ...job.data, cursor: 'rc_0019', enqueued: 20 });
    await enqueueRewardSyncs(
      h.runtime.ctx.queues,
      Array.from({ length: 10 }, (_, i) => `rc_${String(20 + i).padStart(4, '0')}`),
      'reconciliation',
      { consumersPerJob: 8, reconciliation: jobId },
    );
    const { processReconciliation } = await import('../../src/reconciliation/fan-out.js');
    const fresh = await h.runtime.ctx.queues.reconciliation.getJob(jobId);
    if (!fresh) throw new Error('job vanished');
    const result = await processReconciliation(fresh as PerksJob<'reconcile'>, h.runtime.ctx);
    expect(result.enqueued).toBe(30);
    expect(result.batches).toBe(1);
    // In jobs of 8 consumers (SYNC_CONSUMERS_PER_JOB of the harness): one of 8, one of 2,
    // and not twice: the jobs the dead replica had added keep their ids.
    const waiting = await h.runtime.ctx.queues.rewardSync.getJobs(['wait', 'prioritized']);
    const jobIds = (j: { data: { consumerIds: string[] } }) => j.data.consumerIds;
    expect(waiting.map((j) => jobIds(j).length).sort()).toEqual([2, 8]);
    expect(waiting.flatMap(jobIds).sort()).toEqual(
      Array.from({ length: 10 }, (_, i) => `rc_${String(20 + i).padStart(4, '0')}`),
    );
  });
  it("resumed after a crash between a batch's enqueue and its cursor, enqueues that batch as it was", async () => {
    harness = await startHarness({ env: { RECONCILE_BATCH_SIZE: '10' } });
    const h = harness;
    await seedConsumers(h, 30);
    await h.worker.close(1000); // nothing runs the jobs
    const { jobId } = await startReconciliation(h.runtime.ctx.queues);
    const { rewardSync, reconciliation } = h.runtime.ctx.queues;
    // The replica dies just after its third batch reached Redis, before its cursor is saved.
    const addBulk = rewardSync.addBulk.bind(rewardSync);
    let calls = 0;
    const crash = vi.spyOn(rewardSync, 'addBulk').mockImplementation(async (jobs) => {
      const added = await addBulk(jobs);
      if (++calls === 3) throw new Error('killed');
      return added;
    });
    const { processReconciliation } = await import('../../src/reconciliation/fan-out.js');
    const job = (await reconciliation.getJob(jobId)) as PerksJob<'reconcile'>;
    await expect(processReconciliation(job, h.runtime.ctx)).rejects.toThrow('killed');
    crash.mockRestore();
    // The batch is saved beside the job: its data holds only what an older build reads.
    const crashed = await reconciliation.getJob(jobId);
    expect(Object.keys(crashed?.data ?? {}).sort()).toEqual([
      'cursor',
      'enqueued',
      'startedAt',
      'trigger',
    ]);
    // Enrolled meanwhile inside that batch: read again, the batch would be chunked otherwise,
    // and the chunks' ids are their first consumer's.
    await h.runtime.ctx.store.recordEnrollment({
      consumerId: 'rc_0020a',
      outcome: 'created',
      extraConsents: [],
      removedConsents: [],
      at: new Date(),
    });
    const fresh = (await reconciliation.getJob(jobId)) as PerksJob<'reconcile'>;
    const result = await processReconciliation(fresh, h.runtime.ctx);
    const waiting = await rewardSync.getJobs(['wait', 'prioritized']);
    const enqueued = waiting.flatMap((j) => (j.data as { consumerIds: string[] }).consumerIds);
    expect(enqueued.filter((c, i) => enqueued.indexOf(c) !== i)).toEqual([]);
    // rc_0020a enrolled behind the cursor of the batch: left to the next run, as documented.
    expect(enqueued.sort()).toEqual(
      Array.from({ length: 30 }, (_, i) => `rc_${String(i).padStart(4, '0')}`),
    );
    expect(result.enqueued).toBe(30);
  });

  it('status shows the last reconciliation started, whatever the queue ran since', async () => {
    harness = await startHarness();
    const h = harness;
    const { queues, tallies } = h.runtime.ctx;
    await queues.reconciliation.add('reconcile', { trigger: 'sometimes' }); // fails: its payload
    await h.idle();
    const today = await startReconciliation(queues, 'schedule');
    await h.idle();
    // A day of the hourly pruning on the same queue: the 21 newest jobs of each state.
    for (let hour = 0; hour < 21; hour++) await queues.reconciliation.add('prune-events', {});
    await h.idle();
    expect((await lastReconciliation(queues, tallies))?.jobId).toBe(today.jobId);
  });
  it("does not enqueue again a saved batch its cursor has passed (a crash after the cursor's save)", async () => {
    harness = await startHarness({ env: { RECONCILE_BATCH_SIZE: '10' } });
    const h = harness;
    await seedConsumers(h, 30);
    await h.worker.close(1000);
    const { jobId } = await startReconciliation(h.runtime.ctx.queues);
    const job = await h.runtime.ctx.queues.reconciliation.getJob(jobId);
    await job?.updateData({ ...job.data, cursor: 'rc_0019', enqueued: 20 });
    const ids = Array.from({ length: 10 }, (_, i) => `rc_${String(10 + i).padStart(4, '0')}`);
    const { redis, prefix } = h.runtime.ctx.tallies;
    const batch = JSON.stringify({ after: 'rc_0009', ids, perJob: 8 });
    await redis.set(`${prefix}:reconciliation:in-flight:${jobId}`, batch);
    const { processReconciliation } = await import('../../src/reconciliation/fan-out.js');
    const fresh = (await h.runtime.ctx.queues.reconciliation.getJob(
      jobId,
    )) as PerksJob<'reconcile'>;
    const result = await processReconciliation(fresh, h.runtime.ctx);
    expect(result.enqueued).toBe(30);
    const waiting = await h.runtime.ctx.queues.rewardSync.getJobs(['wait', 'prioritized']);
    const enqueued = waiting.flatMap((j) => (j.data as { consumerIds: string[] }).consumerIds);
    expect(enqueued.sort()).toEqual(
      Array.from({ length: 10 }, (_, i) => `rc_${String(20 + i).padStart(4, '0')}`),
    );
  });
});
