import { afterEach, describe, expect, it } from 'vitest';
import type { RewardPage } from '../../../src/perks/client.js';
import { InvalidInputError, ResponseShapeError } from '../../../src/perks/errors.js';
import { CONSUMER, fakeApi, type SeenRequest, wireReward } from './fake-api.js';

let api: ReturnType<typeof fakeApi> | undefined;
afterEach(async () => {
  await api?.close();
  api = undefined;
});

/** A server holding `count` rewards, paging them as the spec says. */
function rewardsServer(count: number, tweak?: (page: number, body: PageBody) => PageBody) {
  const all = Array.from({ length: count }, () => wireReward());
  return (req: SeenRequest) => {
    const page = Number(req.url.searchParams.get('page') ?? 1);
    const perPage = Number(req.url.searchParams.get('per_page') ?? 50);
    const body: PageBody = {
      items: all.slice((page - 1) * perPage, page * perPage),
      meta: { page, per_page: perPage, total: count },
    };
    return { status: 200, body: tweak ? tweak(page, body) : body };
  };
}

interface PageBody {
  items: Record<string, unknown>[];
  meta: { page: number; per_page: number; total: number };
}

async function collect(iterable: AsyncIterable<RewardPage>): Promise<RewardPage[]> {
  const pages: RewardPage[] = [];
  for await (const page of iterable) pages.push(page);
  return pages;
}

describe('listRewardPages', () => {
  it.each([
    [0, [0]],
    [1, [1]],
    [1000, [1000]],
    [1001, [1000, 1]],
    [2500, [1000, 1000, 500]],
  ])('%i rewards at 1000 a page -> pages of %j', async (count, sizes) => {
    api = fakeApi({ api: rewardsServer(count) });
    const pages = await collect(api.client.listRewardPages(CONSUMER));
    expect(pages.map((p) => p.ids.length)).toEqual(sizes);
    // Every item valid: the body goes on as received, the parsed items are not kept.
    expect(pages.every((p) => p.json !== undefined && p.items === undefined)).toBe(true);
    expect(pages.map((p) => p.lastPage)).toEqual(sizes.map((_, i) => i === sizes.length - 1));
    expect(pages.every((p) => p.total === count && !p.totalChanged)).toBe(true);
    expect(new Set(pages.flatMap((p) => p.ids)).size).toBe(count);
    expect(api.apiRequests()).toHaveLength(sizes.length);
  });

  it('sends page, per_page, sort and repeated type parameters on an encoded path', async () => {
    api = fakeApi({ api: rewardsServer(3) });
    await collect(
      api.client.listRewardPages('user_42', { perPage: 2, types: ['CASHBACK', 'GIFT'] }),
    );
    const [first, second] = api.apiRequests();
    expect(first?.url.pathname).toBe('/programs/acme/perks/consumers/user_42/rewards');
    expect(first?.url.searchParams.getAll('type')).toEqual(['CASHBACK', 'GIFT']);
    expect(first?.url.searchParams.get('sort')).toBe('-executed_at');
    expect(first?.url.searchParams.get('per_page')).toBe('2');
    expect(second?.url.searchParams.get('page')).toBe('2');
  });

  it('reports a total that changed mid-walk and follows the new total', async () => {
    api = fakeApi({
      api: rewardsServer(5, (page, body) =>
        page === 1 ? body : { ...body, meta: { ...body.meta, total: 7 } },
      ),
    });
    const pages = await collect(api.client.listRewardPages(CONSUMER, { perPage: 2 }));
    expect(pages.map((p) => [p.total, p.totalChanged])).toEqual([
      [5, false],
      [7, true],
      [7, true],
      [7, true],
    ]);
  });

  it('detects a server that repeats a page', async () => {
    api = fakeApi({
      api: rewardsServer(10, (page, body) => (page === 2 ? { ...body, items: pageOne } : body)),
    });
    let pageOne: Record<string, unknown>[] = [];
    const iterable = api.client.listRewardPages(CONSUMER, { perPage: 3 });
    const pages: RewardPage[] = [];
    const error = await (async () => {
      for await (const page of iterable) {
        if (page.page === 1) pageOne = JSON.parse(page.json ?? '{}').items;
        pages.push(page);
      }
    })().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ResponseShapeError);
    expect((error as Error).message).toContain('repeated');
    expect(pages).toHaveLength(1);
  });

  it('takes a page starting where the last did, with the total moved, for a shift', async () => {
    // per_page records came ahead of the cursor: page 2 starts with page 1's first item.
    let pageOne: Record<string, unknown>[] = [];
    api = fakeApi({
      api: rewardsServer(10, (page, body) =>
        page === 2 ? { items: pageOne, meta: { ...body.meta, total: 13 } } : body,
      ),
    });
    const pages: RewardPage[] = [];
    for await (const page of api.client.listRewardPages(CONSUMER, { perPage: 3 })) {
      if (page.page === 1) pageOne = JSON.parse(page.json ?? '{}').items;
      pages.push(page);
      if (page.page === 2) break;
    }
    expect(pages.map((p) => p.totalChanged)).toEqual([false, true]);
  });

  it('refuses more items than per_page', async () => {
    api = fakeApi({
      api: rewardsServer(10, (_page, body) => ({ ...body, items: [...body.items, wireReward()] })),
    });
    await expect(collect(api.client.listRewardPages(CONSUMER, { perPage: 3 }))).rejects.toThrow(
      /exceed per_page/,
    );
  });

  it('refuses more items than the total announces', async () => {
    api = fakeApi({
      api: rewardsServer(5, (_page, body) => ({ ...body, meta: { ...body.meta, total: 1 } })),
    });
    await expect(collect(api.client.listRewardPages(CONSUMER, { perPage: 3 }))).rejects.toThrow(
      /total 1 leaves 1/,
    );
  });

  it('refuses an answer for another page than asked', async () => {
    api = fakeApi({
      api: rewardsServer(5, (_page, body) => ({ ...body, meta: { ...body.meta, page: 1 } })),
    });
    await expect(collect(api.client.listRewardPages(CONSUMER, { perPage: 3 }))).rejects.toThrow(
      /answered page 1/,
    );
  });

  it('stops on an empty page even if the total promised more', async () => {
    api = fakeApi({
      api: rewardsServer(4, (page, body) => (page === 2 ? { ...body, items: [] } : body)),
    });
    const pages = await collect(api.client.listRewardPages(CONSUMER, { perPage: 2 }));
    expect(pages.map((p) => [p.ids.length, p.lastPage])).toEqual([
      [2, false],
      [0, true],
    ]);
  });

  it('a bad item is set aside, naming its field; the page and the walk go on without the body', async () => {
    api = fakeApi({
      api: rewardsServer(4, (page, body) => {
        if (page !== 2) return body;
        const items = body.items.map((item, i) => (i === 1 ? { ...item, amount: '12,5' } : item));
        return { ...body, items };
      }),
    });
    const pages = await collect(api.client.listRewardPages(CONSUMER, { perPage: 2 }));
    expect(pages.map((p) => [p.page, p.ids.length, p.rejected.length, p.lastPage])).toEqual([
      [1, 2, 0, false],
      [2, 1, 1, true],
    ]);
    const [first, second] = pages;
    expect(first?.json).toEqual(expect.any(String));
    // The SQL reads the rewards from the body: one holding a refused item is not sent.
    expect(second?.json).toBeUndefined();
    expect(second?.rejected[0]).toEqual({
      rewardId: expect.stringMatching(/^[0-9a-f-]{36}$/),
      raw: expect.stringContaining('"amount":"12,5"'),
      error: 'amount: must be a decimal string matching the spec pattern',
    });
  });

  it('sets aside an item PostgreSQL cannot store; an escaped pair or backslash is no such item', async () => {
    const extras = [
      { 'tag\u0000': 1 },
      { emoji: '\ud83d\ude00' },
      { path: 'C:\\u0000' },
      { note: ['ok', { deep: 'lone \udfff' }] },
    ];
    api = fakeApi({
      api: rewardsServer(4, (_page, body) => ({
        ...body,
        items: body.items.map((item, i) => ({ ...item, ...extras[i] })),
      })),
    });
    const [page] = await collect(api.client.listRewardPages(CONSUMER, { perPage: 4 }));
    expect(page?.ids).toHaveLength(2);
    expect(page?.rejected.map((r) => r.error)).toEqual([
      '(item): must not contain a NUL character or an unpaired surrogate',
      'note[1].deep: must not contain a NUL character or an unpaired surrogate',
    ]);
  });

  it.each([
    ['perPage 0', 'user_42', { perPage: 0 }, 'perPage'],
    ['perPage 1001', 'user_42', { perPage: 1001 }, 'perPage'],
    ['perPage 2.5', 'user_42', { perPage: 2.5 }, 'perPage'],
    ['a bad consumer id', 'a/b', {}, 'consumerId'],
    ['a bad type', 'user_42', { types: ['CASH BACK'] }, 'types[0]'],
  ])('rejects %s before any request', async (_name, consumerId, opts, field) => {
    api = fakeApi({ api: rewardsServer(1) });
    const error = await collect(api.client.listRewardPages(consumerId, opts)).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(InvalidInputError);
    expect(error).toMatchObject({ field });
    expect(api.requests).toHaveLength(0);
  });
});

describe('the page stamp', () => {
  it('is when the answered request went out, not the first of its retries', async () => {
    const arrivals: number[] = [];
    const serve = rewardsServer(1);
    api = fakeApi({
      api: (req) => {
        arrivals.push(Date.now());
        return arrivals.length === 1
          ? { status: 502, body: '<html>bad gateway</html>' }
          : serve(req);
      },
      client: { retry: { minDelayMs: 40, maxDelayMs: 40 } },
    });
    const [page] = await collect(api.client.listRewardPages(CONSUMER));
    expect(arrivals).toHaveLength(2);
    expect(page?.requestedAt.getTime()).toBeGreaterThan(arrivals[0] ?? Infinity);
    expect(page?.requestedAt.getTime()).toBeLessThanOrEqual(arrivals[1] ?? 0);
  });
});
