/**
 * Sync jobs of several consumers (a reconciliation's fan-out): each consumer is synced as its
 * own job would sync it, and keeps what its own job would give it: retries in a job of its
 * own, a place in `failed`, no second sync while its own is pending, nothing lost to a 429 or
 * a shutdown, nor to an outage of the credentials.
 */
import { RateLimitError } from 'bullmq';
import { afterEach, describe, expect, it } from 'vitest';
import { BackToWait } from '../../src/jobs/failures.js';
import {
  processRewardSyncBatch,
  type RewardSyncBatchResult,
} from '../../src/jobs/sync-rewards-batch.js';
import { jobNames } from '../../src/queues/names.js';
import type { PerksJob } from '../../src/queues/payloads.js';
import { enqueueRewardSync, enqueueRewardSyncs } from '../../src/queues/producer.js';
import type { Fault } from '../../src/sandbox/faults.js';
import { expectConsistent } from '../support/processes.js';
import { consumerRequests, type Harness, startHarness } from '../support/worker-harness.js';

let harness: Harness | undefined;
afterEach(async () => {
  await harness?.close();
  harness = undefined;
});

const idsOf = (prefix: string, n: number) =>
  Array.from({ length: n }, (_, i) => `${prefix}_${String(i).padStart(2, '0')}`);

/** A job of several consumers, added with the worker stopped, to be run by the test itself. */
async function batchJob(
  h: Harness,
  consumerIds: string[],
): Promise<PerksJob<'sync-rewards-batch'>> {
  await h.worker.close(1000);
  const added = await h.runtime.ctx.queues.rewardSync.add(jobNames.syncRewardsBatch, {
    consumerIds,
    reason: 'reconciliation',
  });
  const job = await h.runtime.ctx.queues.rewardSync.getJob(added.id ?? '');
  if (!job) throw new Error('job vanished');
  return job as PerksJob<'sync-rewards-batch'>;
}

async function syncCounts(h: Harness): Promise<Record<string, number>> {
  const metric = await h.runtime.metrics.registry.getSingleMetric(
    'perks_worker_reward_syncs_total',
  );
  const counts: Record<string, number> = {};
  for (const { labels, value } of (await metric?.get())?.values ?? []) {
    counts[String(labels.outcome)] = value;
  }
  return counts;
}

describe('sync jobs of several consumers', () => {
  it('sync each consumer; one that fails is retried in a job of its own, and shows as failed if it never succeeds', async () => {
    harness = await startHarness({
      env: {
        PERKS_RETRY_ATTEMPTS: '2',
        PERKS_RETRY_MAX_MS: '500',
        JOB_ATTEMPTS: '3',
        JOB_BACKOFF_MS: '50',
      },
    });
    const h = harness;
    const ids = idsOf('bt', 13);
    const [never, later, gone] = ['bt_03', 'bt_05', 'bt_12'];
    for (const id of ids) {
      h.sandbox.state.addConsumer(id, id === gone ? { enrolled: false } : { rewards: 3 });
    }
    // 2 tries per call: the batch's call, then each attempt of its own job (3).
    const fail = (consumerId: string, count: number) =>
      h.sandbox.faults.inject({
        route: 'listRewards',
        consumerId,
        count,
        kind: 'status',
        status: 500,
      });
    fail(never, 2 + 2 * 3);
    fail(later, 2 + 2);

    await enqueueRewardSyncs(h.runtime.ctx.queues, ids, 'manual', { consumersPerJob: 8 });
    await h.idle(60_000);

    const q = h.runtime.ctx.queues.rewardSync;
    const batches = (await q.getJobs(['completed'])).filter(
      (job) => job.name === jobNames.syncRewardsBatch,
    );
    expect(batches.map((job) => job.data.consumerIds.length).sort()).toEqual([5, 8]);
    const results = batches.map((job) => job.returnvalue as RewardSyncBatchResult);
    const sum = (pick: (r: RewardSyncBatchResult) => number) =>
      results.reduce((n, r) => n + pick(r), 0);
    expect(sum((r) => r.synced)).toBe(10);
    expect(sum((r) => r.notEnrolled)).toBe(1);
    expect(results.flatMap((r) => r.retriedAlone).sort()).toEqual([never, later]);
    expect(sum((r) => r.written.inserted)).toBe(10 * 3);

    const failed = await q.getJobs(['failed']);
    expect(failed.map((job) => [job.name, job.data.consumerId, job.attemptsMade])).toEqual([
      [jobNames.syncRewards, never, 3],
    ]);
    // Handed off after a first retry's delay: JOB_BACKOFF_MS 50, less up to half (jitter).
    expect(failed[0]?.opts.delay).toBeGreaterThanOrEqual(25);
    expect(failed[0]?.opts.delay).toBeLessThanOrEqual(50);
    expect(h.sandbox.faults.list()).toEqual([]);
    await expectConsistent(
      h.runtime.ctx.store.pool,
      h.sandbox,
      ids.filter((id) => id !== never && id !== gone),
    );
    expect(await h.rewardIds(never)).toEqual([]);
    expect((await h.runtime.ctx.store.getConsumer(gone))?.notEnrolledAt).toBeInstanceOf(Date);
    expect(await syncCounts(h)).toEqual({ synced: 11, not_enrolled: 1, retried_alone: 2 });
  }, 60_000);

  it('leave a consumer with a sync job of its own to that job, and clear a key left by a vanished one', async () => {
    harness = await startHarness();
    const h = harness;
    for (const id of ['own_a', 'own_b', 'own_c']) h.sandbox.state.addConsumer(id, { rewards: 2 });
    const job = await batchJob(h, ['own_a', 'own_b', 'own_c']);
    const q = h.runtime.ctx.queues.rewardSync;
    const own = await enqueueRewardSync(h.runtime.ctx.queues, { consumerId: 'own_a' });
    // A deduplication key whose job is gone (removed by hand, say).
    await h.runtime.connection.set(`${q.keys.de}:own_c`, 'a-job-that-is-gone');

    const result = await processRewardSyncBatch(job, h.runtime.ctx);

    expect(result).toMatchObject({ consumers: 3, synced: 1, leftToOwnJob: ['own_a', 'own_c'] });
    const syncedUpstream = consumerRequests(h.sandbox)
      .filter((r) => r.path.includes('/rewards'))
      .map((r) => r.consumerId);
    expect(syncedUpstream).toEqual(['own_b']);
    // own_a keeps its one job; own_c has a job of its own again.
    const waiting = (await q.getJobs(['wait', 'prioritized'])).filter(
      (j) => j.name === jobNames.syncRewards,
    );
    expect(waiting.map((j) => [j.data.consumerId, j.data.reason]).sort()).toEqual([
      ['own_a', undefined],
      ['own_c', 'reconciliation'],
    ]);
    expect(waiting.find((j) => j.data.consumerId === 'own_a')?.id).toBe(own.id);
  });

  // What pauses the queues or workers stops the batch's other syncs. In each case thr_b's first
  // page comes 3 s late (thr_a and thr_c are done by then) and its second is refused; thr_d's
  // only page would take 20 s, and the refusal stops it.
  interface Stop {
    cause: string;
    why: BackToWait['why'];
    refusal: Pick<Fault, 'kind' | 'status' | 'retryAfterSeconds'>;
    before?: (h: Harness) => Promise<void>;
    after?: (h: Harness) => Promise<void>;
  }
  const stops: Stop[] = [
    {
      cause: 'a long 429',
      why: 'throttled by the API',
      refusal: { kind: 'throttle429', retryAfterSeconds: 30 },
      after: async (h) => {
        // Paused for the 429's 30 s.
        expect(await h.runtime.ctx.queues.rewardSync.getRateLimitTtl()).toBeGreaterThan(20_000);
      },
    },
    {
      cause: 'credentials refused (403)',
      why: 'credentials refused (403)',
      refusal: { kind: 'status', status: 403 },
      // The probe's GET is refused too, and a probe has seen it (the start's, which worked,
      // would otherwise answer for a while).
      before: async (h) => {
        h.sandbox.faults.inject({
          route: 'getReward',
          count: 1_000_000,
          kind: 'status',
          status: 403,
        });
        expect(await h.runtime.ctx.mintOutage.probe(true)).toBe(false);
      },
    },
  ];

  it.each(stops)(
    'on $cause stop the other syncs and go back to wait, holding only the consumers not yet synced',
    async ({ why, refusal, before, after }) => {
      harness = await startHarness({ env: { PERKS_TIMEOUT_MS: '5000' } });
      const h = harness;
      for (const id of ['thr_a', 'thr_c', 'thr_d']) h.sandbox.state.addConsumer(id, { rewards: 2 });
      h.sandbox.state.addConsumer('thr_b', { rewards: 1500 });
      const job = await batchJob(h, ['thr_a', 'thr_b', 'thr_c', 'thr_d']);
      await before?.(h);
      const inject = h.sandbox.faults.inject.bind(h.sandbox.faults);
      inject({ route: 'listRewards', consumerId: 'thr_b', count: 1, kind: 'delay', delayMs: 3000 });
      inject({ route: 'listRewards', consumerId: 'thr_b', count: 1, ...refusal });
      inject({
        route: 'listRewards',
        consumerId: 'thr_d',
        count: 1,
        kind: 'delay',
        delayMs: 20_000,
      });

      const stopped = await processRewardSyncBatch(job, h.runtime.ctx).catch((error) => error);

      // A RateLimitError: BullMQ moves the job back to wait without spending an attempt.
      expect(stopped).toBeInstanceOf(RateLimitError);
      expect(stopped).toBeInstanceOf(BackToWait);
      expect(stopped.why).toBe(why);
      const q = h.runtime.ctx.queues.rewardSync;
      expect((await q.getJob(job.id ?? ''))?.data).toEqual({
        consumerIds: ['thr_b', 'thr_d'],
        reason: 'reconciliation',
      });
      // Neither handed to a job of its own, where each would spend attempts on the outage.
      const own = (await q.getJobs(['wait', 'delayed'])).filter(
        (j) => j.name === jobNames.syncRewards,
      );
      expect(own).toEqual([]);
      await after?.(h);
      await expectConsistent(h.runtime.ctx.store.pool, h.sandbox, ['thr_a', 'thr_c']);
      expect(await h.rewardIds('thr_b')).toHaveLength(1000); // its first page, written
      expect(await h.rewardIds('thr_d')).toEqual([]);
    },
  );

  it('cancelled (a shutdown), keep only the consumers not yet synced for the retry', async () => {
    harness = await startHarness();
    const h = harness;
    const ids = ['cut_a', 'cut_b', 'cut_c'];
    for (const id of ids) h.sandbox.state.addConsumer(id, { rewards: 2 });
    const job = await batchJob(h, ids);
    h.sandbox.faults.inject({
      route: 'listRewards',
      consumerId: 'cut_c',
      count: 1,
      kind: 'delay',
      delayMs: 20_000,
    });
    const cancel = new AbortController();
    const running = processRewardSyncBatch(job, h.runtime.ctx, cancel.signal);
    // Cancelled once cut_a and cut_b are written, while cut_c waits for its page.
    const deadline = Date.now() + 10_000;
    for (;;) {
      const written = await Promise.all(['cut_a', 'cut_b'].map((id) => h.rewardIds(id)));
      if (written.every((rows) => rows.length === 2)) break;
      if (Date.now() > deadline) throw new Error('cut_a and cut_b were not written within 10 s');
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    cancel.abort('worker shutting down');

    await expect(running).rejects.toBe('worker shutting down');

    const after = await h.runtime.ctx.queues.rewardSync.getJob(job.id ?? '');
    expect(after?.data).toEqual({ consumerIds: ['cut_c'], reason: 'reconciliation' });
    await expectConsistent(h.runtime.ctx.store.pool, h.sandbox, ['cut_a', 'cut_b']);
  });

  it('of up to 100 consumers run without a listener warning', async () => {
    harness = await startHarness();
    const h = harness;
    const ids = idsOf('many', 100);
    for (const id of ids) h.sandbox.state.addConsumer(id, { rewards: 1 });
    const job = await batchJob(h, ids);
    const warnings: string[] = [];
    const onWarning = (warning: Error) => warnings.push(warning.name);
    process.on('warning', onWarning);
    try {
      const result = await processRewardSyncBatch(job, h.runtime.ctx);
      expect(result).toMatchObject({ consumers: 100, synced: 100 });
      await new Promise((resolve) => setImmediate(resolve)); // warnings are emitted on next tick
    } finally {
      process.off('warning', onWarning);
    }
    expect(warnings).toEqual([]);
  });
});
