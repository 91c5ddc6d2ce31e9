/**
 * Credentials under fault: the token revoked mid-run (401), the token endpoint down for a
 * while (scaled down from a minute to 5 s), and a token missing the PERKS scope (403: the
 * credentials' outage, as a refused mint: no job lost, no retry storm); a 403 on one consumer
 * alone is that consumer's failure.
 */
import { afterEach, describe, expect, it } from 'vitest';
import {
  enqueueEnrollment,
  enqueueRewardSync,
  enqueueRewardSyncs,
} from '../../src/queues/producer.js';
import { expectConsistent, runCli, sleep, waitFor } from '../support/processes.js';
import { type Harness, startHarness } from '../support/worker-harness.js';

let harness: Harness | undefined;
afterEach(async () => {
  await harness?.close();
  harness = undefined;
});

async function progressOf(h: Harness, jobId: string): Promise<number> {
  const job = await h.runtime.ctx.queues.rewardSync.getJob(jobId);
  return (job?.progress as { page?: number } | undefined)?.page ?? 0;
}

describe('tokens', () => {
  it('a token revoked mid-sync (401) is re-minted once and the sync completes', async () => {
    harness = await startHarness({ sandbox: { seed: 41, latencyMs: 250 } });
    const h = harness;
    h.sandbox.state.addConsumer('revoked', { rewards: 3500 });
    const job = await enqueueRewardSync(h.runtime.ctx.queues, { consumerId: 'revoked' });
    await waitFor('page 1', async () =>
      (await progressOf(h, job.id ?? '')) >= 1 ? true : undefined,
    );
    h.sandbox.state.revokeTokens();
    await h.idle(60_000);

    const log = h.sandbox.state.requestLog().filter((e) => e.path.includes('/rewards'));
    expect(log.map((e) => e.status)).toContain(401);
    expect(h.sandbox.state.counters().tokensMinted).toBe(2);
    await expectConsistent(h.runtime.ctx.store.pool, h.sandbox, ['revoked']);
    expect(await h.runtime.ctx.queues.rewardSync.getFailedCount()).toBe(0);
  }, 60_000);

  it('the token endpoint down for 5 s (a minute, scaled) while the token is revoked: jobs wait without spending attempts, then complete', async () => {
    harness = await startHarness({
      sandbox: { seed: 42, latencyMs: 100 },
      env: {
        PERKS_RETRY_ATTEMPTS: '2',
        PERKS_RETRY_MAX_MS: '1000',
        JOB_ATTEMPTS: '20',
        JOB_BACKOFF_MS: '200',
      },
    });
    const h = harness;
    const ids = ['tok_down_1', 'tok_down_2', 'tok_down_3', 'tok_down_4', 'tok_down_5'];
    for (const id of ids) h.sandbox.state.addConsumer(id, { rewards: 1200 });
    const first = await enqueueRewardSync(h.runtime.ctx.queues, { consumerId: ids[0] ?? '' });
    await waitFor('page 1', async () =>
      (await progressOf(h, first.id ?? '')) >= 1 ? true : undefined,
    );
    // The endpoint answers 503 (with and without an envelope) to every mint from now on.
    h.sandbox.faults.inject({ route: 'token', count: 1_000_000, kind: 'empty', status: 503 });
    h.sandbox.state.revokeTokens();
    const single = await enqueueRewardSync(h.runtime.ctx.queues, { consumerId: ids[1] ?? '' });
    // A job of several consumers: the failing mint stops all its syncs and pauses the workers.
    await enqueueRewardSyncs(h.runtime.ctx.queues, ids.slice(2), 'manual', { consumersPerJob: 3 });
    await sleep(5000);

    const q = h.runtime.ctx.queues.rewardSync;
    expect(await q.getFailedCount()).toBe(0);
    expect(await q.getDelayedCount()).toBe(0); // paused in wait, not retrying on backoff
    for (const id of ids.slice(1)) expect(await h.rewardIds(id)).toEqual([]);
    // `status` says so: this client's mint failing, the replicas meeting it taking no API job.
    const statusEnv = { REDIS_URL: h.config.redis.url, QUEUE_PREFIX: h.prefix };
    const shown = await runCli(['status'], { ...statusEnv, DATABASE_URL: h.config.database.url });
    expect(shown.stdout).toMatch(
      /^perks api: TOKEN MINT FAILING for client sandbox-client since \S+ \(503: .*\); the replicas meeting it take no API job, next try \S+\n/,
    );
    const mintsWhileDown = h.sandbox.state.counters().requests.token ?? 0;
    h.sandbox.faults.clear();
    await h.idle(60_000);

    await expectConsistent(h.runtime.ctx.store.pool, h.sandbox, ids);
    expect(await q.getFailedCount()).toBe(0);
    // The outage cost no attempt: each job completed on its first counted one.
    const completed = await q.getCompleted();
    expect(completed.length).toBe(3);
    for (const job of completed) expect(job.attemptsMade, job.id).toBe(1);
    expect((await q.getJob(single.id ?? ''))?.attemptsMade).toBe(1);
    // Backoff, not a storm: the workers pause 1, 2 then 4 s between mints.
    expect(mintsWhileDown).toBeLessThan(20);
  }, 90_000);

  it("a 403 on one consumer's rewards is that consumer's: its job fails after its attempts, the others sync, nothing pauses", async () => {
    harness = await startHarness({
      sandbox: { seed: 44 },
      env: { JOB_ATTEMPTS: '3', JOB_BACKOFF_MS: '50' },
    });
    const h = harness;
    h.sandbox.state.addConsumer('forbidden_one', { rewards: 3 });
    h.sandbox.state.addConsumer('allowed_one', { rewards: 3 });
    h.sandbox.faults.inject({
      route: 'listRewards',
      consumerId: 'forbidden_one',
      count: 1_000_000,
      kind: 'status',
      status: 403,
    });
    const forbidden = await enqueueRewardSync(h.runtime.ctx.queues, {
      consumerId: 'forbidden_one',
    });
    const allowed = await enqueueRewardSync(h.runtime.ctx.queues, { consumerId: 'allowed_one' });
    const queue = h.runtime.ctx.queues.rewardSync;
    await waitFor('the forbidden consumer failed for good', async () =>
      (await (await queue.getJob(forbidden.id ?? ''))?.getState()) === 'failed' ? true : undefined,
    );
    expect((await queue.getJob(forbidden.id ?? ''))?.attemptsMade).toBe(3);
    // The other runs beside it, and may still be writing when the forbidden one gives up.
    await waitFor('the allowed consumer synced', async () =>
      (await (await queue.getJob(allowed.id ?? ''))?.getState()) === 'completed' ? true : undefined,
    );
    const { requests } = h.sandbox.state.counters();
    expect(requests.listRewards).toBe(4);
    // The start's probe answers for the three 403s: one that worked holds for a while.
    expect(requests.getReward).toBe(1);
    const ready = await fetch(`${h.opsUrl}/readyz`);
    expect(ready.status).toBe(200);
  }, 60_000);

  it('a 403 for a missing scope loses no job: this replica pauses its API jobs, and says why', async () => {
    harness = await startHarness({
      sandbox: { seed: 43, scopes: ['LOYALTIES'] },
      env: { JOB_ATTEMPTS: '8', JOB_BACKOFF_MS: '50' },
    });
    const h = harness;
    h.sandbox.state.addConsumer('no_scope', { rewards: 5 });
    h.sandbox.state.addConsumer('no_scope_enroll', { enrolled: false });
    const sync = await enqueueRewardSync(h.runtime.ctx.queues, { consumerId: 'no_scope' });
    const enroll = await enqueueEnrollment(
      h.runtime.ctx.queues,
      { consumerId: 'no_scope_enroll' },
      undefined,
    );
    // The start's probe found the scope refused: /readyz says so, naming the answer.
    await waitFor('readyz to say refused', async () => {
      const ready = await fetch(`${h.opsUrl}/readyz`);
      const text = await ready.text();
      return ready.status === 503 && /credentials refused \(403 ERR-403-00\)/.test(text)
        ? true
        : undefined;
    });
    await sleep(2000);
    for (const job of [
      await h.runtime.ctx.queues.rewardSync.getJob(sync.id ?? ''),
      await h.runtime.ctx.queues.enrollment.getJob(enroll.jobId),
    ]) {
      expect(await job?.getState()).not.toBe('failed');
      expect(job?.attemptsMade).toBe(0);
    }
    const counters = h.sandbox.state.counters();
    expect(counters.enrollmentsCreated).toBe(0);
    // No retry storm: the probes back off (1 s, 2 s, ...), no API job is taken.
    expect(counters.requests.listRewards ?? 0).toBeLessThanOrEqual(1);
    expect(counters.requests.enroll ?? 0).toBeLessThanOrEqual(1);
    expect(counters.requests.getReward ?? 0).toBeLessThanOrEqual(4);
    expect((await h.runtime.ctx.store.getConsumer('no_scope_enroll'))?.lastError).toBeUndefined();
  }, 60_000);
});
