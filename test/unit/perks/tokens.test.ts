import { afterEach, describe, expect, it } from 'vitest';
import {
  AuthError,
  ResponseShapeError,
  ThrottledError,
  TokenMintError,
} from '../../../src/perks/errors.js';
import { type CachedToken, refreshMarginMs, type TokenCache } from '../../../src/perks/tokens.js';
import {
  CLIENT_ID,
  CONSUMER,
  envelope,
  fakeApi,
  fakeToken,
  REWARD_ID,
  SECRET,
  sequence,
  wireReward,
} from './fake-api.js';

let api: ReturnType<typeof fakeApi> | undefined;
afterEach(async () => {
  await api?.close();
  api = undefined;
});

const okReward = () => ({ status: 200, body: wireReward({ id: REWARD_ID }) });

describe('POST /tokens', () => {
  it('sends Basic credentials, the JSON grant and x-api-version; the bearer goes to API calls', async () => {
    api = fakeApi({ api: okReward, client: { apiVersion: '2.1.0' } });
    await api.client.getReward(CONSUMER, REWARD_ID);
    const [mint] = api.tokenRequests();
    expect(mint?.method).toBe('POST');
    expect(mint?.headers.authorization).toBe(
      `Basic ${Buffer.from(`${CLIENT_ID}:${SECRET}`).toString('base64')}`,
    );
    expect(mint?.headers['content-type']).toBe('application/json');
    expect(mint?.headers['x-api-version']).toBe('2.1.0');
    expect(JSON.parse(mint?.body ?? '')).toEqual({ grant_type: 'client_credentials' });

    const [call] = api.apiRequests();
    expect(call?.headers.authorization).toBe(`Bearer ${api.minted[0]}`);
    expect(call?.headers['x-api-version']).toBe('2.1.0');
    expect(call?.headers.accept).toBe('application/json');
    expect(call?.headers['content-type']).toBeUndefined();
    // The secret is only ever sent to /tokens.
    expect(JSON.stringify(call)).not.toContain(SECRET);
  });

  it('falls back to a form body when the token endpoint refuses JSON, and keeps that format', async () => {
    let mints = 0;
    api = fakeApi({
      // The second call's 401 makes the client mint again: that mint must go as a form at once.
      api: sequence(okReward(), envelope(401, 'ERR-401-00', 'Unauthorized'), okReward()),
      tokens: (req) => {
        // An OAuth 2.0 server that reads only application/x-www-form-urlencoded.
        if (req.headers['content-type'] !== 'application/x-www-form-urlencoded') {
          return envelope(400, 'ERR-400-00', 'Bad Request');
        }
        mints += 1;
        return { status: 200, body: { access_token: fakeToken(mints), expires_in: '3600' } };
      },
    });
    await api.client.getReward(CONSUMER, REWARD_ID);
    expect(api.tokenRequests().map((r) => r.headers['content-type'])).toEqual([
      'application/json',
      'application/x-www-form-urlencoded',
    ]);
    expect(mints).toBe(1);
    await api.client.getReward(CONSUMER, REWARD_ID);
    expect(api.tokenRequests().map((r) => r.headers['content-type'])).toEqual([
      'application/json',
      'application/x-www-form-urlencoded',
      'application/x-www-form-urlencoded',
    ]);
    expect(mints).toBe(2);
    const forms = api.tokenRequests().slice(1);
    expect(forms.map((r) => r.body)).toEqual([
      'grant_type=client_credentials',
      'grant_type=client_credentials',
    ]);
  });

  it('tolerates extra fields and a lower-case token_type', async () => {
    api = fakeApi({
      tokens: () => ({
        status: 200,
        body: {
          access_token: fakeToken(1),
          token_type: 'bearer',
          expires_in: 3600,
          scope: 'PERKS',
        },
      }),
      api: okReward,
    });
    await expect(api.client.getReward(CONSUMER, REWARD_ID)).resolves.toBeDefined();
  });

  it('rejects a token response without expires_in, naming the field', async () => {
    api = fakeApi({ tokens: () => ({ status: 200, body: { access_token: 'x' } }), api: okReward });
    const error = await api.client.getReward(CONSUMER, REWARD_ID).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TokenMintError);
    expect((error as TokenMintError).cause).toBeInstanceOf(ResponseShapeError);
    expect((error as TokenMintError).cause).toMatchObject({
      operation: 'mintToken',
      path: 'expires_in',
    });
  });

  it.each([true, [3600]])(
    'rejects expires_in %j: seconds, a number or numeric string',
    async (expires_in) => {
      api = fakeApi({
        tokens: () => ({ status: 200, body: { access_token: 'eyJa.eyJb.c', expires_in } }),
        api: okReward,
      });
      const error = await api.client.getReward(CONSUMER, REWARD_ID).catch((e: unknown) => e);
      expect((error as TokenMintError).cause).toMatchObject({ path: 'expires_in' });
    },
  );

  it('bad credentials -> TokenMintError (an AuthError), no API call, no loop', async () => {
    api = fakeApi({ tokens: () => envelope(401, 'ERR-401-00', 'Unauthorized'), api: okReward });
    const error = await api.client.getReward(CONSUMER, REWARD_ID).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TokenMintError);
    expect((error as TokenMintError).cause).toBeInstanceOf(AuthError);
    expect(error).toMatchObject({ operation: 'mintToken', status: 401, code: 'ERR-401-00' });
    expect(api.tokenRequests()).toHaveLength(1);
    expect(api.apiRequests()).toHaveLength(0);
  });

  it('a 429 on /tokens stays a ThrottledError, so the queues pause for it', async () => {
    api = fakeApi({
      tokens: () => ({ status: 429, body: 'slow down', headers: { 'retry-after': '30' } }),
      api: okReward,
    });
    const error = await api.client.getReward(CONSUMER, REWARD_ID).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ThrottledError);
    expect(error).toMatchObject({ operation: 'mintToken', retryAfterMs: 30_000 });
    expect(api.apiRequests()).toHaveLength(0);
  });

  it('a 503 on /tokens is retried by the mint, not multiplied by the call', async () => {
    api = fakeApi({
      tokens: () => ({ status: 503, body: '' }),
      api: okReward,
      client: { retry: { attempts: 3, minDelayMs: 1 } },
    });
    await expect(api.client.getReward(CONSUMER, REWARD_ID)).rejects.toMatchObject({
      operation: 'mintToken',
      status: 503,
    });
    expect(api.tokenRequests()).toHaveLength(3);
  });
});

describe('token lifetime', () => {
  it('refreshes ahead of expiry by min(10% of lifetime, 60 s)', () => {
    expect(refreshMarginMs(3_600_000)).toBe(60_000);
    expect(refreshMarginMs(100_000)).toBe(10_000);
    expect(refreshMarginMs(10_000)).toBe(1_000);
  });

  it('reuses the token until the margin, then mints a new one (injected clock)', async () => {
    let now = Date.parse('2024-05-01T10:00:00Z');
    let minted = 0;
    api = fakeApi({
      tokens: () => {
        minted += 1;
        return { status: 200, body: { access_token: fakeToken(minted), expires_in: 100 } };
      },
      api: okReward,
      client: { now: () => now },
    });
    await api.client.getReward(CONSUMER, REWARD_ID);
    now += 89_000; // 100 s lifetime, 10 s margin: still fresh
    await api.client.getReward(CONSUMER, REWARD_ID);
    expect(minted).toBe(1);
    now += 2_000; // 91 s: inside the margin
    await api.client.getReward(CONSUMER, REWARD_ID);
    expect(minted).toBe(2);
    const bearers = api.apiRequests().map((r) => r.headers.authorization);
    expect(bearers[0]).toBe(bearers[1]);
    expect(bearers[2]).not.toBe(bearers[1]);
  });

  it('goes on with the held token when a refresh ahead of expiry fails, trying again later', async () => {
    let now = Date.parse('2024-05-01T10:00:00Z');
    const answers = sequence(
      { status: 200, body: { access_token: fakeToken(1), expires_in: 100 } },
      { status: 503, body: '' },
      { status: 503, body: '' },
      { status: 200, body: { access_token: fakeToken(2), expires_in: 100 } },
    );
    api = fakeApi({
      tokens: answers,
      api: okReward,
      client: { now: () => now, retry: { attempts: 1, minDelayMs: 1 } },
    });
    await api.client.getReward(CONSUMER, REWARD_ID);
    now += 92_000; // inside the 10 s margin: the refresh fails, the held token serves
    await api.client.getReward(CONSUMER, REWARD_ID);
    await api.client.getReward(CONSUMER, REWARD_ID); // no second mint at once
    expect(api.tokenRequests()).toHaveLength(2);
    now += 6_000; // 98 s: tried again, failing again; still valid
    await api.client.getReward(CONSUMER, REWARD_ID);
    now += 1_500; // 99.5 s: within the last second the token is not used; the mint works
    await api.client.getReward(CONSUMER, REWARD_ID);
    const bearers = api.apiRequests().map((r) => r.headers.authorization);
    expect(new Set(bearers.slice(0, 4)).size).toBe(1);
    expect(bearers[4]).not.toBe(bearers[0]);
  });

  it('100 concurrent calls share one mint', async () => {
    api = fakeApi({ api: okReward });
    const client = api.client;
    await Promise.all(Array.from({ length: 100 }, () => client.getReward(CONSUMER, REWARD_ID)));
    expect(api.tokenRequests()).toHaveLength(1);
    expect(api.apiRequests()).toHaveLength(100);
  });

  it('two clients given one cache share one token', async () => {
    let stored: CachedToken | undefined;
    const cache: TokenCache = {
      get: async () => stored,
      set: async (token) => {
        stored = token;
      },
      invalidate: async (token) => {
        if (stored?.accessToken === token) stored = undefined;
      },
    };
    api = fakeApi({ api: okReward, client: { tokenCache: cache } });
    const other = fakeApi({ api: okReward, client: { tokenCache: cache } });
    await api.client.getReward(CONSUMER, REWARD_ID);
    await other.client.getReward(CONSUMER, REWARD_ID);
    expect(api.tokenRequests().length + other.tokenRequests().length).toBe(1);
    await other.close();
  });
});

describe('401 on an API call', () => {
  it('drops the token, mints a new one and retries the call once', async () => {
    const minted: number[] = [];
    api = fakeApi({
      api: sequence(envelope(401, 'ERR-401-00', 'Unauthorized'), okReward()),
      client: { hooks: { onTokenMinted: () => minted.push(1) } },
    });
    await expect(api.client.getReward(CONSUMER, REWARD_ID)).resolves.toMatchObject({
      id: REWARD_ID,
    });
    expect(api.tokenRequests()).toHaveLength(2);
    expect(minted).toHaveLength(2);
    const [first, second] = api.apiRequests();
    expect(first?.headers.authorization).toBe(`Bearer ${api.minted[0]}`);
    expect(second?.headers.authorization).toBe(`Bearer ${api.minted[1]}`);
  });

  it('a second 401 surfaces AuthError instead of looping', async () => {
    api = fakeApi({ api: () => ({ status: 401, body: '' }) });
    const error = await api.client.getReward(CONSUMER, REWARD_ID).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(AuthError);
    expect(error).toMatchObject({ status: 401, operation: 'getReward' });
    expect(api.tokenRequests()).toHaveLength(2);
    expect(api.apiRequests()).toHaveLength(2);
  });

  it('a 403 does not re-mint', async () => {
    api = fakeApi({ api: () => envelope(403, 'ERR-403-00', 'Forbidden') });
    await expect(api.client.getReward(CONSUMER, REWARD_ID)).rejects.toBeInstanceOf(AuthError);
    expect(api.tokenRequests()).toHaveLength(1);
    expect(api.apiRequests()).toHaveLength(1);
  });
});

describe('a failing token cache', () => {
  it('degrades to minting locally: calls still succeed, one mint per process', async () => {
    const down = async () => {
      throw new Error('connect ECONNREFUSED 127.0.0.1:6379');
    };
    const warnings: string[] = [];
    const logger = {
      info: () => undefined,
      debug: () => undefined,
      warn: (_obj: unknown, msg: string) => warnings.push(msg),
    } as unknown as import('pino').Logger;
    api = fakeApi({
      api: okReward,
      client: {
        tokenCache: { get: down, set: down, invalidate: down, lock: down },
        logger,
      },
    });
    await Promise.all(Array.from({ length: 10 }, () => api?.client.getReward(CONSUMER, REWARD_ID)));
    expect(api.tokenRequests()).toHaveLength(1);
    expect(warnings.length).toBeGreaterThan(0);
  });
});

it('a cache that never answers (Redis away, its commands queued) mints locally, 2 s a step', async () => {
  const silent = () => new Promise<never>(() => {});
  api = fakeApi({
    api: okReward,
    client: { tokenCache: { get: silent, set: silent, invalidate: silent, lock: silent } },
  });
  await api.client.getReward(CONSUMER, REWARD_ID);
  expect(api.tokenRequests()).toHaveLength(1);
}, 15_000);

it('a short lifetime (expires_in 5): no token goes out with under 1 s left', async () => {
  let now = Date.parse('2024-05-01T10:00:00Z');
  let n = 0;
  api = fakeApi({
    tokens: () => ({ status: 200, body: { access_token: fakeToken(++n), expires_in: 5 } }),
    api: () => ({ status: 200, body: wireReward({ id: REWARD_ID }) }),
    client: { now: () => now },
  });
  await api.client.getReward(CONSUMER, REWARD_ID);
  now += 4_300; // 0.7 s left of 5 s
  await api.client.getReward(CONSUMER, REWARD_ID);
  const [first, second] = api.apiRequests().map((r) => r.headers.authorization);
  expect(second).not.toBe(first);
});
