import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RewardJson, type Sandbox, startSandbox } from '../../../src/sandbox/index.js';
import { apiClient, envelopeOf } from './http.js';

interface Page {
  items: RewardJson[];
  meta: { page: number; per_page: number; total: number };
}

let sandbox: Sandbox;
let api: Awaited<ReturnType<typeof apiClient>>;
const consumer = 'sbx_0001';
const base = `/perks/consumers/${consumer}/rewards`;

beforeAll(async () => {
  sandbox = await startSandbox({ consumers: 1, rewardsPerConsumer: 0 });
  // Fixed instants so that ties and gifts are certain, not left to the generator.
  const tx = (executed_at: string) => ({ external_id: `tx_${executed_at}`, executed_at });
  sandbox.state.addRewardItems(consumer, [
    {
      type: 'CASHBACK',
      created_at: '2025-03-01T10:00:00Z',
      transaction: tx('2025-03-01T09:00:00Z'),
    },
    {
      type: 'CASHBACK',
      created_at: '2025-03-01T10:00:00Z',
      transaction: tx('2025-02-01T09:00:00Z'),
    },
    { created_at: '2025-01-01T10:00:00Z', transaction: null, type: 'GIFT' },
    { created_at: '2025-05-01T10:00:00Z', transaction: null, type: 'GIFT' },
    {
      type: 'CASHBACK',
      created_at: '2025-04-01T10:00:00Z',
      transaction: tx('2025-03-01T09:00:00Z'),
    },
  ]);
  sandbox.state.addRewardItems(
    consumer,
    Array.from({ length: 7 }, () => ({ type: 'CASHBACK' })),
  );
  sandbox.state.addRewardItems(consumer, [{ type: 'VOUCHER', transaction: null }]);
  sandbox.state.addConsumer('not_enrolled', { enrolled: false, rewards: 2 });
  api = await apiClient(sandbox);
});
afterAll(async () => {
  await sandbox.close();
});

async function page(query: string): Promise<Page> {
  const answer = await api.get(`${base}${query}`);
  expect(answer.status).toBe(200);
  return answer.json() as Page;
}

async function all(query: string): Promise<RewardJson[]> {
  const items: RewardJson[] = [];
  for (let p = 1; ; p++) {
    const { items: got } = await page(`${query}&page=${p}&per_page=4`);
    if (got.length === 0) return items;
    items.push(...got);
  }
}

describe('GET /perks/consumers/{id}/rewards', () => {
  it('pages with the default of 50 and counts every match in total', async () => {
    const first = await page('');
    expect(first.meta).toEqual({ page: 1, per_page: 50, total: 13 });
    expect(first.items).toHaveLength(13);
    const second = await page('?page=2&per_page=5');
    expect(second.meta).toEqual({ page: 2, per_page: 5, total: 13 });
    expect(second.items).toHaveLength(5);
    const past = await page('?page=9&per_page=5');
    expect(past).toEqual({ items: [], meta: { page: 9, per_page: 5, total: 13 } });
  });

  it('pages through every reward exactly once in every sort order', async () => {
    const ids = sandbox.state
      .rewardsOf(consumer)
      .map((r) => r.id)
      .sort();
    for (const sort of ['created_at', '-created_at', 'executed_at', '-executed_at']) {
      const items = await all(`?sort=${sort}`);
      expect(items.map((r) => r.id).sort()).toEqual(ids);
    }
  });

  it('sorts by executed_at both ways with rewards without a transaction last', async () => {
    for (const sort of ['executed_at', '-executed_at']) {
      const items = await all(`?sort=${sort}`);
      const withTx = items.filter((r) => r.transaction !== null);
      expect(items.slice(withTx.length).every((r) => r.transaction === null)).toBe(true);
      const keys = withTx.map((r) => Date.parse(r.transaction?.executed_at ?? ''));
      const expected = [...keys].sort((a, b) => (sort.startsWith('-') ? b - a : a - b));
      expect(keys).toEqual(expected);
    }
  });

  it('sorts by created_at both ways, breaking ties by id', async () => {
    for (const sort of ['created_at', '-created_at']) {
      const items = await all(`?sort=${sort}`);
      const sign = sort.startsWith('-') ? -1 : 1;
      let ties = 0;
      for (let i = 1; i < items.length; i++) {
        const [a, b] = [items[i - 1] as RewardJson, items[i] as RewardJson];
        const diff = sign * (Date.parse(b.created_at) - Date.parse(a.created_at));
        expect(diff).toBeGreaterThanOrEqual(0);
        if (diff === 0) {
          ties += 1;
          expect(a.id < b.id).toBe(true);
        }
      }
      // Without a tie in the data, the tie-break above would check nothing.
      expect(ties).toBeGreaterThan(0);
    }
  });

  it('filters on several types, matching any', async () => {
    const gifts = await page('?type=GIFT');
    expect(gifts.meta.total).toBe(2);
    const both = await page('?type=GIFT&type=VOUCHER');
    expect(both.meta.total).toBe(3);
    expect(new Set(both.items.map((r) => r.type))).toEqual(new Set(['GIFT', 'VOUCHER']));
    const cashback = await page('?type=CASHBACK&per_page=2');
    expect(cashback.meta.total).toBe(10);
    expect(cashback.items).toHaveLength(2);
    // "String filters are case-insensitive partial matches."
    expect((await page('?type=cash')).meta.total).toBe(10);
  });

  it.each([
    ['?per_page=0', ['query', 'per_page'], 'greater_than_equal'],
    ['?per_page=1001', ['query', 'per_page'], 'less_than_equal'],
    ['?per_page=ten', ['query', 'per_page'], 'int_parsing'],
    ['?page=0', ['query', 'page'], 'greater_than_equal'],
    ['?sort=amount', ['query', 'sort'], 'enum'],
  ])('400s %s', async (query, loc, type) => {
    const answer = await api.get(`${base}${query}`);
    expect(answer.status).toBe(400);
    expect(envelopeOf(answer)).toMatchObject({ code: 'ERR-400-00', errors: [{ loc, type }] });
  });

  it('accepts per_page 1 and 1000', async () => {
    expect((await page('?per_page=1')).items).toHaveLength(1);
    expect((await page('?per_page=1000')).items).toHaveLength(13);
  });

  it('400s an invalid consumer id and 404s one not enrolled or unknown', async () => {
    const invalid = await api.get('/perks/consumers/x/rewards');
    expect(envelopeOf(invalid).errors?.[0]?.loc).toEqual(['path', 'consumer_id']);
    for (const id of ['not_enrolled', 'nobody_here']) {
      const answer = await api.get(`/perks/consumers/${id}/rewards`);
      expect(answer.status).toBe(404);
      expect(envelopeOf(answer)).toMatchObject({
        code: 'ERR-404-02',
        title: 'Consumer Not Enrolled',
      });
    }
  });

  it('serves a page again as the same bytes, and a new reward at once', async () => {
    sandbox.state.addConsumer('served_twice', { rewards: 3 });
    const listPath = '/perks/consumers/served_twice/rewards?per_page=2';
    const first = await api.get(listPath);
    const again = await api.get(listPath);
    expect(again.text).toBe(first.text);
    expect(again.headers['content-length']).toBe(String(Buffer.byteLength(first.text)));
    expect(first.json()).toMatchObject({ meta: { page: 1, per_page: 2, total: 3 } });
    sandbox.state.addRewards('served_twice', 1);
    expect((await api.get(listPath)).json()).toMatchObject({ meta: { total: 4 } });
  });

  it('keeps a page body until any change to the consumer rewards', () => {
    const { state } = sandbox;
    state.addConsumer('kept_body', { rewards: 2 });
    const query = { sort: 'created_at', types: [], page: 1, perPage: 50 } as const;
    const body = () => state.rewardPageBody('kept_body', query);
    let served = body();
    expect(body()).toBe(served);
    const [first] = state.rewardsOf('kept_body');
    const id = String(first?.id);
    const changes: [string, () => void][] = [
      ['addRewards', () => state.addRewards('kept_body', 1)],
      ['addRewardItems', () => state.addRewardItems('kept_body', [{ type: 'GIFT' }])],
      ['setRewardStatus', () => state.setRewardStatus('kept_body', id, 'PAID_OUT')],
      ['removeReward', () => state.removeReward('kept_body', id)],
    ];
    for (const [name, change] of changes) {
      change();
      const now = body();
      expect(now, name).not.toBe(served);
      expect(JSON.parse(now.toString()), name).toEqual({
        items: JSON.parse(state.rewardPage('kept_body', query).itemsJson),
        meta: { page: 1, per_page: 50, total: state.rewardsOf('kept_body').length },
      });
      served = now;
    }
  });

  it('does not serve type=A,B the page of type=A&type=B', async () => {
    const both = (await api.get(`${base}?type=GIFT&type=CASHBACK`)).json() as Page;
    const one = (await api.get(`${base}?type=GIFT,CASHBACK`)).json() as Page;
    expect(both.meta.total).toBeGreaterThan(0);
    expect(one.meta.total).toBe(0);
  });
});

describe('GET /perks/consumers/{id}/rewards/{reward_id}', () => {
  it('returns the reward as listed', async () => {
    const [reward] = sandbox.state.rewardsOf(consumer);
    const answer = await api.get(`${base}/${reward?.id}`);
    expect(answer.status).toBe(200);
    expect(answer.json()).toEqual(reward);
  });

  it('404s ERR-404-00 for a reward of another consumer or none', async () => {
    const [other] = sandbox.state.rewardsOf('not_enrolled');
    for (const id of [other?.id, '00000000-0000-4000-8000-000000000000']) {
      const answer = await api.get(`${base}/${id}`);
      expect(answer.status).toBe(404);
      expect(envelopeOf(answer)).toMatchObject({ code: 'ERR-404-00', title: 'Not Found' });
    }
  });

  it('404s ERR-404-02 when the consumer is not enrolled', async () => {
    const [reward] = sandbox.state.rewardsOf('not_enrolled');
    const answer = await api.get(`/perks/consumers/not_enrolled/rewards/${reward?.id}`);
    expect(envelopeOf(answer).code).toBe('ERR-404-02');
  });

  it('400s a reward id that is not a uuid', async () => {
    const answer = await api.get(`${base}/not-a-uuid`);
    expect(answer.status).toBe(400);
    expect(envelopeOf(answer).errors).toEqual([
      { loc: ['path', 'reward_id'], msg: expect.any(String), type: 'uuid_parsing' },
    ]);
  });

  it('shows status changes and removals at once', async () => {
    const [reward] = sandbox.state.addRewards('not_enrolled', 1);
    sandbox.state.addConsumer('mover', { rewards: 1 });
    const [moving] = sandbox.state.rewardsOf('mover');
    const path = `/perks/consumers/mover/rewards/${moving?.id}`;
    const listPath = '/perks/consumers/mover/rewards';
    expect((await api.get(listPath)).json()).toMatchObject({ items: [{ id: moving?.id }] });
    sandbox.state.setRewardStatus('mover', String(moving?.id), 'PAID_OUT');
    // The cached page must not serve the old status.
    expect((await api.get(listPath)).json()).toMatchObject({
      items: [{ status: 'PAID_OUT', consumer_status: 'PAID' }],
    });
    expect((await api.get(path)).json()).toMatchObject({
      status: 'PAID_OUT',
      consumer_status: 'PAID',
    });
    sandbox.state.setRewardStatus('mover', String(moving?.id), 'DISPUTED');
    expect((await api.get(path)).json()).toMatchObject({
      status: 'DISPUTED',
      consumer_status: 'PAID',
    });
    sandbox.state.removeReward('mover', String(moving?.id));
    expect((await api.get(path)).status).toBe(404);
    expect((await api.get('/perks/consumers/mover/rewards')).json()).toMatchObject({
      meta: { total: 0 },
    });
    expect(reward).toBeDefined();
  });
});
