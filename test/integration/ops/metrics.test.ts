/**
 * /metrics after real runs: enrollments and syncs with known reward counts, an injected 500,
 * a 429 the job waits out, and jobs that fail. Every counter must move by exactly the
 * expected amount (deltas between two scrapes over HTTP, so earlier tests do not matter).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { enqueueEnrollment, enqueueRewardSync } from '../../../src/queues/producer.js';
import { delta, type Rig, rigConsumerIdKey, scrape, series, startRig } from './rig.js';

let rig: Rig;
beforeAll(async () => {
  rig = await startRig();
});
afterAll(async () => {
  await rig?.close();
});

const m = {
  completed: 'perks_worker_jobs_completed_total',
  failed: 'perks_worker_jobs_failed_total',
  retried: 'perks_worker_jobs_retried_total',
  duration: 'perks_worker_job_duration_seconds_count',
  api: 'perks_worker_api_request_duration_seconds_count',
  throttled: 'perks_worker_api_throttled_total',
  retryWaits: 'perks_worker_api_retry_waits_total',
  minted: 'perks_worker_tokens_minted_total',
  rewards: 'perks_worker_rewards_written_total',
  pages: 'perks_worker_reward_pages_written_total',
  syncs: 'perks_worker_reward_syncs_total',
  enrollments: 'perks_worker_enrollments_total',
  depth: 'perks_worker_queue_jobs',
} as const;

describe('/metrics', () => {
  it('counts 3 enrollments, their syncs (3 + 5 + 7 rewards) and one 500 retried inside the call', async () => {
    const before = await scrape(rig.opsUrl);
    const ids = ['ops-alpha', 'ops-bravo', 'ops-charlie'];
    ids.forEach((id, i) => {
      rig.sandbox.state.addConsumer(id, { enrolled: false, rewards: 3 + 2 * i });
    });
    rig.sandbox.faults.inject({
      route: 'listRewards',
      consumerId: 'ops-bravo',
      count: 1,
      kind: 'status',
      status: 500,
    });
    for (const consumerId of ids) {
      await enqueueEnrollment(rig.runtime.ctx.queues, { consumerId }, rigConsumerIdKey);
    }
    await rig.idle();
    const after = await scrape(rig.opsUrl);
    const d = (name: string, labels: Record<string, string> = {}) =>
      delta(before, after, name, labels);

    expect(d(m.completed, { queue: 'enrollment' })).toBe(3);
    expect(d(m.completed, { queue: 'reward-sync' })).toBe(3);
    expect(d(m.duration, { queue: 'reward-sync', outcome: 'completed' })).toBe(3);
    expect(d(m.enrollments, { outcome: 'created' })).toBe(3);
    expect(d(m.syncs, { outcome: 'synced' })).toBe(3);
    expect(d(m.rewards, { result: 'inserted' })).toBe(15);
    expect(d(m.rewards, { result: 'updated' })).toBe(0);
    expect(d(m.rewards, { result: 'unchanged' })).toBe(0);
    expect(d(m.pages)).toBe(3);
    expect(d(m.api, { operation: 'enrollConsumer', status_class: '2xx' })).toBe(3);
    expect(d(m.api, { operation: 'listRewardPages', status_class: '2xx' })).toBe(3);
    expect(d(m.api, { operation: 'listRewardPages', status_class: '5xx' })).toBe(1);
    expect(d(m.retryWaits, { operation: 'listRewardPages' })).toBe(1);
    expect(d(m.retried, { queue: 'reward-sync', reason: 'error' })).toBe(0);
    expect(d(m.failed, { queue: 'reward-sync', reason: 'error' })).toBe(0);
    // The first calls of the process minted the one token; the sandbox agrees.
    expect(after.get(series(m.minted))).toBe(1);
    expect(rig.sandbox.state.counters().tokensMinted).toBe(1);
    for (const queue of ['enrollment', 'reward-sync']) {
      for (const state of ['waiting', 'active', 'delayed', 'failed']) {
        expect(after.get(series(m.depth, { queue, state })), `${queue} ${state}`).toBe(0);
      }
    }

    // A second sync of the same consumers writes nothing new: all unchanged.
    for (const consumerId of ids) {
      await enqueueRewardSync(rig.runtime.ctx.queues, { consumerId, reason: 'manual' });
    }
    await rig.idle();
    const again = await scrape(rig.opsUrl);
    expect(delta(after, again, m.rewards, { result: 'unchanged' })).toBe(15);
    expect(delta(after, again, m.rewards, { result: 'inserted' })).toBe(0);
    expect(delta(after, again, m.completed, { queue: 'reward-sync' })).toBe(3);
  });

  it('counts a 429 the job waits out in the queue as throttled and rate_limited, not failed', async () => {
    rig.sandbox.state.addConsumer('ops-delta', { enrolled: true, rewards: 4 });
    // Longer than the client sits out inline (1 s): the job goes back to the queue.
    rig.sandbox.faults.inject({
      route: 'listRewards',
      consumerId: 'ops-delta',
      count: 1,
      kind: 'throttle429',
      retryAfterSeconds: 2,
    });
    const before = await scrape(rig.opsUrl);
    await enqueueRewardSync(rig.runtime.ctx.queues, { consumerId: 'ops-delta', reason: 'manual' });
    await rig.idle();
    const after = await scrape(rig.opsUrl);
    const d = (name: string, labels: Record<string, string> = {}) =>
      delta(before, after, name, labels);

    expect(d(m.throttled, { operation: 'listRewardPages' })).toBe(1);
    expect(d(m.api, { operation: 'listRewardPages', status_class: '4xx' })).toBe(1);
    expect(d(m.retried, { queue: 'reward-sync', reason: 'rate_limited' })).toBe(1);
    expect(d(m.duration, { queue: 'reward-sync', outcome: 'rate_limited' })).toBe(1);
    expect(d(m.completed, { queue: 'reward-sync' })).toBe(1);
    expect(d(m.failed, { queue: 'reward-sync', reason: 'error' })).toBe(0);
    expect(d(m.rewards, { result: 'inserted' })).toBe(4);
  });

  it('counts an unrecoverable job and a job that fails every attempt, and shows them in the failed gauge', async () => {
    rig.sandbox.state.addConsumer('ops-echo', { enrolled: false, rewards: 1 });
    // Every enrollment call for ops-echo fails with 502: the client retries, then the job's
    // two attempts (JOB_ATTEMPTS=2 in the rig) both fail.
    rig.sandbox.faults.inject({
      route: 'enroll',
      consumerId: 'ops-echo',
      count: 1000,
      kind: 'status',
      status: 502,
    });
    const before = await scrape(rig.opsUrl);
    // A payload no processor accepts: failed at once, never retried.
    await rig.runtime.ctx.queues.enrollment.add('enroll', { nonsense: true });
    await enqueueEnrollment(rig.runtime.ctx.queues, { consumerId: 'ops-echo' }, rigConsumerIdKey);
    await rig.idle();
    const after = await scrape(rig.opsUrl);
    const d = (name: string, labels: Record<string, string> = {}) =>
      delta(before, after, name, labels);

    expect(d(m.failed, { queue: 'enrollment', reason: 'unrecoverable' })).toBe(1);
    expect(d(m.failed, { queue: 'enrollment', reason: 'error' })).toBe(1);
    expect(d(m.retried, { queue: 'enrollment', reason: 'error' })).toBe(1);
    expect(d(m.completed, { queue: 'enrollment' })).toBe(0);
    expect(d(m.duration, { queue: 'enrollment', outcome: 'unrecoverable' })).toBe(1);
    expect(d(m.duration, { queue: 'enrollment', outcome: 'error' })).toBe(2);
    expect(d(m.api, { operation: 'enrollConsumer', status_class: '5xx' })).toBeGreaterThanOrEqual(
      2,
    );
    expect(after.get(series(m.depth, { queue: 'enrollment', state: 'failed' }))).toBe(2);
  });

  it('serves the Prometheus text format with Node default metrics and no per-consumer label', async () => {
    const response = await fetch(`${rig.opsUrl}/metrics`);
    expect(response.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    const text = await response.text();
    expect(text).toMatch(/^process_cpu_user_seconds_total /m);
    expect(text).toMatch(/^nodejs_eventloop_lag_seconds /m);
    expect(text).toMatch(/^# HELP perks_worker_jobs_completed_total /m);
    const labelNames = new Set(
      [...text.matchAll(/^perks_worker_\w+\{(.*)\}/gm)].flatMap(([, labels = '']) =>
        [...labels.matchAll(/(\w+)="/g)].map(([, name]) => name),
      ),
    );
    expect([...labelNames].sort()).toEqual(
      [
        'le',
        'operation',
        'outcome',
        'queue',
        'reason',
        'result',
        'source',
        'state',
        'status_class',
      ].sort(),
    );
    expect(text).not.toContain('ops-alpha');
  });
});
