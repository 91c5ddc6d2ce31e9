import { afterEach, describe, expect, it } from 'vitest';
import { ThrottledError, UpstreamError } from '../../../src/perks/errors.js';
import type { RetryEvent } from '../../../src/perks/retry.js';
import { backoffDelayMs } from '../../../src/perks/retry.js';
import { CONSUMER, envelope, fakeApi, REWARD_ID, sequence, wireReward } from './fake-api.js';

let api: ReturnType<typeof fakeApi> | undefined;
afterEach(async () => {
  await api?.close();
  api = undefined;
});

const okReward = () => ({ status: 200, body: wireReward({ id: REWARD_ID }) });

describe('retries', () => {
  it('500, 500, 200 succeeds after two retries, reported to onRetry', async () => {
    const retries: RetryEvent[] = [];
    api = fakeApi({
      api: sequence(envelope(500, 'ERR-500-00', 'Internal'), { status: 500, body: '' }, okReward()),
      client: { hooks: { onRetry: (e) => retries.push(e) } },
    });
    await expect(api.client.getReward(CONSUMER, REWARD_ID)).resolves.toMatchObject({
      id: REWARD_ID,
    });
    expect(api.apiRequests()).toHaveLength(3);
    expect(retries.map((r) => [r.operation, r.attempt])).toEqual([
      ['getReward', 1],
      ['getReward', 2],
    ]);
  });

  it.each([
    [400, 'ERR-400-00'],
    [403, 'ERR-403-00'],
    [404, 'ERR-404-00'],
    [404, 'ERR-404-02'],
    [409, 'ERR-409-00'],
  ])('%i %s is called exactly once', async (status, code) => {
    api = fakeApi({ api: () => envelope(status, code, 'x'), client: { retry: { attempts: 5 } } });
    await expect(api.client.getReward(CONSUMER, REWARD_ID)).rejects.toMatchObject({ status, code });
    expect(api.apiRequests()).toHaveLength(1);
  });

  it.each([502, 503, 504])(
    '%i is retried up to the attempts bound, then thrown',
    async (status) => {
      api = fakeApi({ api: () => ({ status, body: '' }), client: { retry: { attempts: 3 } } });
      const error = await api.client.getReward(CONSUMER, REWARD_ID).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(UpstreamError);
      expect(api.apiRequests()).toHaveLength(3);
    },
  );

  it('attempts: 1 means no retry at all', async () => {
    api = fakeApi({ api: () => ({ status: 500, body: '' }), client: { retry: { attempts: 1 } } });
    await expect(api.client.getReward(CONSUMER, REWARD_ID)).rejects.toBeInstanceOf(UpstreamError);
    expect(api.apiRequests()).toHaveLength(1);
  });

  it('stops retrying when the next wait would pass maxRetryTimeMs', async () => {
    api = fakeApi({
      api: () => ({ status: 500, body: '' }),
      client: {
        retry: { attempts: 10, minDelayMs: 1_000, maxDelayMs: 1_000, maxRetryTimeMs: 400 },
      },
    });
    await expect(api.client.getReward(CONSUMER, REWARD_ID)).rejects.toBeInstanceOf(UpstreamError);
    expect(api.apiRequests()).toHaveLength(1);
  });

  it('an AbortSignal cancels a backoff wait', async () => {
    const controller = new AbortController();
    api = fakeApi({
      api: () => ({ status: 503, body: '' }),
      client: {
        retry: { attempts: 5, minDelayMs: 60_000, maxDelayMs: 60_000, maxRetryTimeMs: 600_000 },
        // Abort as soon as the client starts waiting.
        hooks: { onRetry: () => controller.abort(new Error('shutting down')) },
      },
    });
    const error = await api.client
      .getReward(CONSUMER, REWARD_ID, { signal: controller.signal })
      .catch((e: unknown) => e);
    expect((error as Error).message).toBe('shutting down');
    expect(api.apiRequests()).toHaveLength(1);
  });

  it('an already aborted signal sends nothing', async () => {
    api = fakeApi({ api: okReward });
    const signal = AbortSignal.abort(new Error('stop'));
    await expect(api.client.getReward(CONSUMER, REWARD_ID, { signal })).rejects.toThrow('stop');
    expect(api.requests).toHaveLength(0);
  });

  it('backoff grows exponentially with jitter, capped', () => {
    const retry = { minDelayMs: 200, maxDelayMs: 5_000 };
    expect(backoffDelayMs(1, retry, () => 0)).toBe(100);
    expect(backoffDelayMs(1, retry, () => 1)).toBe(200);
    expect(backoffDelayMs(3, retry, () => 1)).toBe(800);
    expect(backoffDelayMs(10, retry, () => 1)).toBe(5_000);
    expect(backoffDelayMs(10, retry, () => 0)).toBe(2_500);
  });
});

describe('429', () => {
  it('a short Retry-After is waited out once inside the call', async () => {
    const retries: RetryEvent[] = [];
    api = fakeApi({
      api: sequence(
        { status: 429, body: 'slow down', headers: { 'retry-after': '1' } },
        okReward(),
      ),
      client: { hooks: { onRetry: (e) => retries.push(e) } },
    });
    await expect(api.client.getReward(CONSUMER, REWARD_ID)).resolves.toBeDefined();
    expect(api.apiRequests()).toHaveLength(2);
    expect(retries).toHaveLength(1);
    // The wait is the one the API asked for.
    expect(retries[0]?.delayMs).toBe(1_000);
  });

  it('a second short 429 in the same call is thrown, not waited again', async () => {
    api = fakeApi({ api: () => ({ status: 429, body: '', headers: { 'retry-after': '0' } }) });
    const error = await api.client.getReward(CONSUMER, REWARD_ID).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ThrottledError);
    expect(api.apiRequests()).toHaveLength(2);
  });

  it('a long Retry-After is thrown at once with its delay, for the queue to pause', async () => {
    api = fakeApi({
      api: () => ({ status: 429, body: 'Too Many Requests', headers: { 'retry-after': '120' } }),
      client: { maxInlineThrottleWaitMs: 1_000 },
    });
    const error = await api.client.getReward(CONSUMER, REWARD_ID).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ThrottledError);
    expect((error as ThrottledError).retryAfterMs).toBe(120_000);
    expect(api.apiRequests()).toHaveLength(1);
  });
});
