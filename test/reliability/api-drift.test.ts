/**
 * The API changing under us: the total growing mid-walk, a reward disappearing mid-walk,
 * unknown type and status values, extra fields, and items that break the contract (a
 * required field missing, amounts with exponents or letters or past numeric, dates without Z
 * or past timestamptz, strings PostgreSQL cannot store):
 * each such item is kept in rejected_rewards naming its field, the rest of its page written.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { enqueueRewardSync } from '../../src/queues/producer.js';
import type { RewardJson } from '../../src/sandbox/index.js';
import { expectConsistent, runCli, waitFor } from '../support/processes.js';
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

  // The walk that sees the gone ones marks none missing; the second walk, which does not, marks
  // them, and them alone.
  it.each([
    ['one gone from page 1, one added at the end: confirmed by id', 1, 1, 0],
    ['60 gone from page 1, 60 added at the end: too many to confirm, walked again', 60, 2, 60],
  ])(
    'a shift with the total unchanged (%s): no reward wrongly missing',
    async (_, shifted, scans, missing) => {
      harness = await startHarness({ sandbox: { seed: 54, latencyMs: 300 } });
      const h = harness;
      h.sandbox.state.addConsumer('shifted', { rewards: 2500 });
      expect((await syncAndWait(h, 'shifted')).state).toBe('completed');
      const job = await enqueueRewardSync(h.runtime.ctx.queues, { consumerId: 'shifted' });
      await pageReached(h, job.id ?? '', 1);
      // The newest (page 1) go: every later reward moves up, and the first of page 2 onto page
      // 1, read already. Those added sort last, so the total stays 2,500.
      const executedAt = (r: RewardJson) => r.transaction?.executed_at ?? '';
      const rewards = h.sandbox.state.rewardsOf('shifted') as RewardJson[];
      const newest = rewards.sort((a, b) => executedAt(b).localeCompare(executedAt(a)));
      for (const gone of newest.slice(0, shifted)) h.sandbox.state.removeReward('shifted', gone.id);
      const added = Array.from({ length: shifted }, (_, i) => ({
        ...(i === 0 ? { id: lastId } : {}),
        transaction: null,
      }));
      h.sandbox.state.addRewardItems('shifted', added);
      await h.idle(60_000);

      const done = await h.runtime.ctx.queues.rewardSync.getJob(job.id ?? '');
      expect(done?.returnvalue).toMatchObject({ consistent: true, scans, markedMissing: missing });
      const { rows } = await h.runtime.ctx.store.pool.query<{ id: string }>(
        "select id from perks.rewards where consumer_id = 'shifted' and missing_since is not null",
      );
      const listed = new Set(h.sandbox.state.rewardsOf('shifted').map((r) => r.id));
      expect(rows.filter((r) => listed.has(r.id))).toEqual([]);
      expect(rows).toHaveLength(missing);
    },
    60_000,
  );

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
  it('one malformed reward among 2100: the others stored, it kept in rejected_rewards, nothing marked missing; its valid version clears it', async () => {
    harness = await startHarness({ sandbox: { seed: 54 } });
    const h = harness;
    const { pool } = h.runtime.ctx.store;
    h.sandbox.state.addConsumer('broken', { rewards: 2100 });
    expect((await syncAndWait(h, 'broken')).state).toBe('completed');
    // A stored reward turns malformed upstream, a new one arrives malformed (last, on page 3).
    const victim = h.sandbox.state.rewardsOf('broken')[0] as RewardJson;
    h.sandbox.state.addRewardItems('broken', [
      { ...victim, amount: `0.${'1'.repeat(20_000)}` },
      { id: lastId, transaction: null, amount: undefined } as Partial<RewardJson>,
    ]);

    const { job, state } = await syncAndWait(h, 'broken');
    expect(state).toBe('completed');
    expect(job?.returnvalue).toMatchObject({ consistent: true, rejected: 2, markedMissing: 0 });
    const stored = await h.rewardIds('broken');
    expect(stored).toHaveLength(2100);
    expect(stored).not.toContain(lastId);
    const rejected = await pool.query<{ reward_id: string; error: string; raw: string }>(
      'select reward_id, error, raw from perks.rejected_rewards order by reward_id',
    );
    expect(rejected.rows.map((r) => [r.reward_id, r.error])).toEqual(
      [
        [victim.id, 'amount: must have at most 131072 digits before the point, 16383 after'],
        [lastId, 'amount: Invalid input: expected string, received undefined'],
      ].sort(),
    );
    expect(JSON.parse(rejected.rows.find((r) => r.reward_id === lastId)?.raw ?? '')).toMatchObject({
      id: lastId,
      transaction: null,
    });
    const missing = await pool.query(
      'select id from perks.rewards where missing_since is not null',
    );
    expect(missing.rows).toEqual([]);
    const metrics = await (await fetch(`${h.opsUrl}/metrics`)).text();
    expect(metrics).toMatch(/^perks_worker_rewards_rejected_total 2$/m);
    expect(metrics).toMatch(/^perks_worker_rewards_rejected 2$/m);
    const env = { REDIS_URL: h.config.redis.url, QUEUE_PREFIX: h.prefix, DATABASE_URL: h.db.url };
    const status = JSON.parse((await runCli(['status', '--json'], env)).stdout) as {
      datastore: { rewardsRejected: number };
    };
    expect(status.datastore.rewardsRejected).toBe(2);
    expect((await runCli(['status'], env)).stdout).toMatch(
      /^rewards rejected \(rejected_rewards\) +2$/m,
    );

    // The API serves valid versions: both written, the rejections gone.
    h.sandbox.state.addRewardItems('broken', [
      { ...victim, amount: '1.25' },
      { id: lastId, transaction: null, amount: '3' },
    ]);
    expect((await syncAndWait(h, 'broken')).state).toBe('completed');
    expect(await h.rewardIds('broken')).toContain(lastId);
    const amounts = await pool.query<{ amount: string }>(
      'select amount::text from perks.rewards where id = $1',
      [victim.id],
    );
    expect(amounts.rows).toEqual([{ amount: '1.25' }]);
    const left = await pool.query('select 1 from perks.rejected_rewards');
    expect(left.rows).toEqual([]);
    const after = await (await fetch(`${h.opsUrl}/metrics`)).text();
    expect(after).toMatch(/^perks_worker_rewards_rejected 0$/m);
  }, 60_000);

  it('each malformed item is kept naming its field; the rest of the page is written', async () => {
    harness = await startHarness({ sandbox: { seed: 55 } });
    const h = harness;
    h.sandbox.state.addConsumer('odd_ones', { rewards: 5 });
    const bad: [Partial<RewardJson>, RegExp][] = [
      [{ amount: '1e5' }, /^amount: /],
      [{ amount: '12.5O' }, /^amount: /],
      [{ created_at: '2024-05-01T10:00:00' }, /^created_at: /],
      [
        { transaction: { external_id: 'tx-1', executed_at: '2024-05-01 10:00:00' } },
        /^transaction\.executed_at: /,
      ],
      [{ type: 7 } as unknown as Partial<RewardJson>, /^type: /],
      [{ brand: { name: 'A', logo: 'logo.png' } }, /^brand\.logo: /],
      // Valid JSON that PostgreSQL refuses: each would fail its whole page's statement.
      [{ brand: { name: 'Ac\u0000me', logo: null } }, /^brand\.name: must not contain a NUL/],
      [{ note: 'x\ud800' } as Partial<RewardJson>, /^note: must not contain a NUL/],
      [{ 'a\u0000b': 1 } as Partial<RewardJson>, /^\(item\): must not contain a NUL/],
      [{ created_at: '0000-01-01T00:00:00Z' }, /^created_at: must be a date-time from year 0001/],
      [
        { transaction: { external_id: 'tx-2', executed_at: '2024-05-01T10:00:00+23:59' } },
        /^transaction\.executed_at: must be an RFC 3339 date-time in UTC/,
      ],
    ];
    const items = h.sandbox.state.addRewardItems(
      'odd_ones',
      bad.map(([item]) => item),
    );
    // Not a uuid: kept by the hash of its text.
    h.sandbox.state.addRewardItems('odd_ones', [{ id: 'reward-1' }]);
    const { job, state } = await syncAndWait(h, 'odd_ones');
    expect(state).toBe('completed');
    expect(job?.returnvalue).toMatchObject({ rejected: 12, markedMissing: 0 });
    expect(await h.rewardIds('odd_ones')).toHaveLength(5);
    const { rows } = await h.runtime.ctx.store.pool.query<{ reward_id: string; error: string }>(
      'select reward_id, error from perks.rejected_rewards',
    );
    expect(rows).toHaveLength(12);
    items.forEach((item, i) => {
      expect(rows.find((r) => r.reward_id === item.id)?.error).toMatch(bad[i]?.[1] ?? /-/);
    });
    expect(rows.find((r) => r.reward_id === null)?.error).toBe('id: must be a uuid');
  });
});
