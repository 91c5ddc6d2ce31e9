/**
 * The API changing under us: the total growing mid-walk, a reward disappearing mid-walk,
 * unknown type and status values, extra fields, and items that break the contract (a
 * required field missing, amounts with exponents or letters, dates without Z): such a page
 * is rejected whole, the error names the field, and the pages before it are kept.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { enqueueRewardSync } from '../../src/queues/producer.js';
import type { RewardJson } from '../../src/sandbox/index.js';
import { expectConsistent, waitFor } from '../support/processes.js';
import { type Harness, startHarness } from '../support/worker-harness.js';

let harness: Harness | undefined;
afterEach(async () => {
  await harness?.close();
  harness = undefined;
});

async function syncAndWait(h: Harness, consumerId: string) {
  const job = await enqueueRewardSync(h.runtime.ctx.queues, { consumerId });
  await h.idle(60_000);
  const done = await h.runtime.ctx.queues.rewardSync.getJob(job.id ?? '');
  return { job: done, state: await done?.getState() };
}

function pageReached(h: Harness, jobId: string, page: number) {
  return waitFor(`job ${jobId} at page ${page}`, async () => {
    const job = await h.runtime.ctx.queues.rewardSync.getJob(jobId);
    return ((job?.progress as { page?: number } | undefined)?.page ?? 0) >= page ? true : undefined;
  });
}

/** Sorts after every generated reward under -executed_at: no transaction, highest id. */
const lastId = 'ffffffff-ffff-4fff-8fff-ffffffffffff';

describe('the API changing mid-walk', () => {
  it('total growing during the walk: rescanned, every reward stored', async () => {
    harness = await startHarness({ sandbox: { seed: 51, latencyMs: 300 } });
    const h = harness;
    h.sandbox.state.addConsumer('growing', { rewards: 2500 });
    const job = await enqueueRewardSync(h.runtime.ctx.queues, { consumerId: 'growing' });
    await pageReached(h, job.id ?? '', 1);
    h.sandbox.state.addRewards('growing', 700);
    await h.idle(60_000);

    const done = await h.runtime.ctx.queues.rewardSync.getJob(job.id ?? '');
    expect(await done?.getState()).toBe('completed');
    expect(done?.returnvalue).toMatchObject({ consistent: true, markedMissing: 0 });
    await expectConsistent(h.runtime.ctx.store.pool, h.sandbox, ['growing']);
  }, 60_000);

  it('a reward disappearing during the walk: the rest stored, the gone one marked missing', async () => {
    harness = await startHarness({ sandbox: { seed: 52, latencyMs: 300 } });
    const h = harness;
    h.sandbox.state.addConsumer('shrinking', { rewards: 2500 });
    const job = await enqueueRewardSync(h.runtime.ctx.queues, { consumerId: 'shrinking' });
    await pageReached(h, job.id ?? '', 1);
    // One that page 1 already stored (page 1 holds the newest executed_at).
    const stored = await h.rewardIds('shrinking');
    const gone = stored[0] ?? '';
    h.sandbox.state.removeReward('shrinking', gone);
    await h.idle(60_000);

    expect(await (await h.runtime.ctx.queues.rewardSync.getJob(job.id ?? ''))?.getState()).toBe(
      'completed',
    );
    await expectConsistent(h.runtime.ctx.store.pool, h.sandbox, ['shrinking']);
    const { rows } = await h.runtime.ctx.store.pool.query<{ id: string }>(
      'select id from perks.rewards where missing_since is not null',
    );
    // Marked by this walk if it rescanned consistently, else by the next sync.
    if (rows.length === 0) await syncAndWait(h, 'shrinking');
    const again = await h.runtime.ctx.store.pool.query<{ id: string }>(
      'select id from perks.rewards where missing_since is not null',
    );
    expect(again.rows.map((r) => r.id)).toEqual([gone]);
  }, 60_000);

  it('stores unknown type and status values and keeps extra fields in raw', async () => {
    harness = await startHarness({ sandbox: { seed: 53 } });
    const h = harness;
    h.sandbox.state.addConsumer('novel', { rewards: 3 });
    const [odd] = h.sandbox.state.addRewardItems('novel', [
      {
        type: 'VOUCHER',
        status: 'DISPUTED',
        consumer_status: 'VALIDATION',
        loyalty_tier: 'gold',
        brand: { name: 'Acme', logo: null, colour: '#fff' },
      } as Partial<RewardJson>,
    ]);
    const { state } = await syncAndWait(h, 'novel');
    expect(state).toBe('completed');
    await expectConsistent(h.runtime.ctx.store.pool, h.sandbox, ['novel']);
    const { rows } = await h.runtime.ctx.store.pool.query<{ raw: Record<string, unknown> }>(
      'select raw from perks.rewards where id = $1',
      [odd?.id],
    );
    expect(rows[0]?.raw).toMatchObject({ loyalty_tier: 'gold', brand: { colour: '#fff' } });
  });
});

describe('items that break the contract', () => {
  it('a required field missing on page 3: that page rejected whole, the error names the field, pages 1-2 kept', async () => {
    harness = await startHarness({ sandbox: { seed: 54 }, env: { JOB_ATTEMPTS: '2' } });
    const h = harness;
    h.sandbox.state.addConsumer('broken', { rewards: 2100 });
    h.sandbox.state.addRewardItems('broken', [
      { id: lastId, transaction: null, amount: undefined } as Partial<RewardJson>,
    ]);
    const { job, state } = await syncAndWait(h, 'broken');

    expect(state).toBe('failed');
    expect(job?.failedReason).toMatch(/items\[100\]\.amount/);
    const stored = await h.rewardIds('broken');
    expect(stored).toHaveLength(2000);
    expect(stored).not.toContain(lastId);
    const upstream = new Set(h.sandbox.state.rewardsOf('broken').map((r) => r.id));
    expect(stored.every((id) => upstream.has(id))).toBe(true);
  });

  it.each([
    ['an amount with an exponent', { amount: '1e5' }, /items\[\d+\]\.amount/],
    ['an amount with letters', { amount: '12.5O' }, /items\[\d+\]\.amount/],
    ['a created_at without Z', { created_at: '2024-05-01T10:00:00' }, /items\[\d+\]\.created_at/],
    [
      'an executed_at without a zone',
      { transaction: { external_id: 'tx-1', executed_at: '2024-05-01 10:00:00' } },
      /items\[\d+\]\.transaction\.executed_at/,
    ],
    ['a type that is not a string', { type: 7 }, /items\[\d+\]\.type/],
    ['an id that is not a uuid', { id: 'reward-1' }, /items\[\d+\]\.id/],
  ])(
    '%s: the page is refused naming the field; nothing written; the worker goes on',
    async (_name, item, field) => {
      harness = await startHarness({ sandbox: { seed: 55 }, env: { JOB_ATTEMPTS: '2' } });
      const h = harness;
      h.sandbox.state.addConsumer('odd_one', { rewards: 0 });
      h.sandbox.state.addRewardItems('odd_one', [item as unknown as Partial<RewardJson>]);
      h.sandbox.state.addRewards('odd_one', 5);
      h.sandbox.state.addConsumer('fine_one', { rewards: 5 });
      const { job, state } = await syncAndWait(h, 'odd_one');
      expect(state).toBe('failed');
      expect(job?.failedReason).toMatch(field);
      expect(await h.rewardIds('odd_one')).toEqual([]);
      // The worker keeps consuming.
      expect((await syncAndWait(h, 'fine_one')).state).toBe('completed');
      await expectConsistent(h.runtime.ctx.store.pool, h.sandbox, ['fine_one']);
    },
  );
});
