import { afterEach, describe, expect, it } from 'vitest';
import {
  AuthError,
  ConflictError,
  ConsumerNotEnrolledError,
  NotFoundError,
  PerksError,
  parseRetryAfter,
  ResponseShapeError,
  ThrottledError,
  TransportError,
  UpstreamError,
  ValidationError,
} from '../../../src/perks/errors.js';
import {
  CLIENT_ID,
  CONSUMER,
  envelope,
  type FakeResponse,
  fakeApi,
  REWARD_ID,
  SECRET,
  sequence,
} from './fake-api.js';

let api: ReturnType<typeof fakeApi> | undefined;
afterEach(async () => {
  await api?.close();
  api = undefined;
});

/** Runs getReward against one scripted answer (repeated on retries) and returns the error. */
async function failWith(response: FakeResponse, attempts = 1): Promise<PerksError> {
  api = fakeApi({ api: () => response, client: { retry: { attempts, minDelayMs: 1 } } });
  const error = await api.client.getReward(CONSUMER, REWARD_ID).catch((e: unknown) => e);
  if (!(error instanceof PerksError))
    throw new Error(`expected a PerksError, got ${String(error)}`);
  return error;
}

describe('the spec error table, with the envelope', () => {
  it('an envelope without status or title still carries its code (ERR-404-02 is not a plain 404)', async () => {
    const error = await failWith({
      status: 404,
      body: { code: 'PRK-404-02' },
    });
    expect(error).toBeInstanceOf(ConsumerNotEnrolledError);
    expect(error.code).toBe('PRK-404-02');
  });

  it('400 ERR-400-00 -> ValidationError with its errors items, extra keys kept', async () => {
    const items = [{ loc: ['reward_id'], msg: 'not a uuid', type: 'uuid_parsing', ctx: { a: 1 } }];
    const error = await failWith(envelope(400, 'ERR-400-00', 'Bad Request', { errors: items }));
    expect(error).toBeInstanceOf(ValidationError);
    expect(error).toMatchObject({ status: 400, code: 'ERR-400-00', title: 'Bad Request' });
    expect(error.errors).toEqual(items);
    expect(error.operation).toBe('getReward');
    expect(error.message).toContain('reward_id: not a uuid');
  });

  it('401 ERR-401-00 -> AuthError with status 401', async () => {
    const error = await failWith(envelope(401, 'ERR-401-00', 'Unauthorized'));
    expect(error).toBeInstanceOf(AuthError);
    expect(error).toMatchObject({ status: 401, code: 'ERR-401-00' });
  });

  it('403 -> AuthError with status 403', async () => {
    const error = await failWith(envelope(403, 'ERR-403-00', 'Forbidden'));
    expect(error).toBeInstanceOf(AuthError);
    expect(error.status).toBe(403);
  });

  it('404 ERR-404-00 -> NotFoundError', async () => {
    const error = await failWith(
      envelope(404, 'ERR-404-00', 'Not Found', { instance: `/rewards/${REWARD_ID}` }),
    );
    expect(error).toBeInstanceOf(NotFoundError);
    expect(error).not.toBeInstanceOf(ConsumerNotEnrolledError);
    expect(error.instance).toBe(`/rewards/${REWARD_ID}`);
  });

  it('404 ERR-404-02 -> ConsumerNotEnrolledError (the full code decides, not the status)', async () => {
    const error = await failWith(envelope(404, 'ERR-404-02', 'Consumer Not Enrolled'));
    expect(error).toBeInstanceOf(ConsumerNotEnrolledError);
    expect(error.code).toBe('ERR-404-02');
  });

  it('a code sharing the status but not the number is not ConsumerNotEnrolled', async () => {
    const error = await failWith(envelope(404, 'ERR-404-20', 'Something else'));
    expect(error).toBeInstanceOf(NotFoundError);
    expect(error).not.toBeInstanceOf(ConsumerNotEnrolledError);
  });

  it('409 -> ConflictError', async () => {
    const error = await failWith(envelope(409, 'ERR-409-01', 'Conflict'));
    expect(error).toBeInstanceOf(ConflictError);
  });

  it.each([500, 502])('%i with the envelope -> UpstreamError keeping the code', async (status) => {
    const error = await failWith(envelope(status, `ERR-${status}-00`, 'Upstream'));
    expect(error).toBeInstanceOf(UpstreamError);
    expect(error).toMatchObject({ status, code: `ERR-${status}-00` });
  });

  it('branches on the HTTP status even when the envelope says another', async () => {
    const error = await failWith({
      status: 404,
      body: { code: 'ERR-500-00', title: 'x', status: 500 },
    });
    expect(error).toBeInstanceOf(NotFoundError);
  });
});

describe('secrets the API echoes in its error envelope', () => {
  it("a token in title, errors[].msg or instance reaches none of the error's fields", async () => {
    let token = '';
    api = fakeApi({
      api: (req) => {
        token = (req.headers.authorization ?? '').replace(/^Bearer /, '');
        return {
          status: 403,
          body: {
            code: 'ERR-403-00',
            title: `Forbidden for ${token}`,
            status: 403,
            errors: [{ loc: ['authorization'], msg: `bad token ${token}`, type: 'x' }],
            instance: `/tokens/${token}`,
          },
        };
      },
    });
    const error = await api.client.getReward(CONSUMER, REWARD_ID).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(PerksError);
    const { message, title, errors, instance } = error as PerksError;
    expect(token.length).toBeGreaterThan(10);
    expect(JSON.stringify({ message, title, errors, instance })).not.toContain(token);
  });

  it('the client secret in a 401 title of POST /tokens stays out of the mint error', async () => {
    api = fakeApi({
      tokens: () => ({
        status: 401,
        body: { code: 'ERR-401-00', title: `Unauthorized: ${CLIENT_ID}:${SECRET}`, status: 401 },
      }),
    });
    const error = await api.client.checkCredentials().catch((e: unknown) => e);
    expect(error).toMatchObject({ status: 401 });
    expect((error as PerksError).title).not.toContain(SECRET);
  });
});

describe('gateway answers without the envelope', () => {
  it('502 HTML page -> UpstreamError with a short sanitized snippet', async () => {
    const html = `<html><head><style>body{color:red}</style></head><body><h1>502 Bad Gateway</h1>${'<p>nginx</p>'.repeat(100)}</body></html>`;
    const error = await failWith({
      status: 502,
      body: html,
      headers: { 'content-type': 'text/html' },
    });
    expect(error).toBeInstanceOf(UpstreamError);
    expect(error.code).toBeUndefined();
    expect(error.message).toContain('HTTP 502');
    expect(error.message).toContain('502 Bad Gateway');
    expect(error.message).not.toContain('<');
    expect(error.message).not.toContain('color:red');
    expect(error.message.length).toBeLessThan(300);
  });

  it.each([503, 504])('%i with plain text -> UpstreamError', async (status) => {
    const error = await failWith({
      status,
      body: 'upstream connect error',
      headers: { 'content-type': 'text/plain' },
    });
    expect(error).toBeInstanceOf(UpstreamError);
    expect(error.message).toContain(`HTTP ${status}`);
    expect(error.message).toContain('upstream connect error');
  });

  it('an empty 401 -> AuthError saying the body was empty', async () => {
    const error = await failWith({ status: 401, body: '' });
    expect(error).toBeInstanceOf(AuthError);
    expect(error).toMatchObject({ status: 401, code: undefined });
    expect(error.message).toContain('empty body');
  });

  it('a 403 with another JSON shape -> AuthError, no crash', async () => {
    const error = await failWith({ status: 403, body: { message: 'Forbidden' } });
    expect(error).toBeInstanceOf(AuthError);
    expect(error.message).toContain('Forbidden');
  });

  it('a truncated JSON body -> a clear error, not a parse crash', async () => {
    const error = await failWith({ status: 500, body: '{"code":"ERR-500-00","ti' });
    expect(error).toBeInstanceOf(UpstreamError);
    expect(error.message).toContain('{"code":"ERR-500-00","ti');
  });

  it('text/plain 429 with Retry-After in seconds -> ThrottledError with retryAfterMs', async () => {
    const error = await failWith({
      status: 429,
      body: 'Too Many Requests',
      headers: { 'retry-after': '30' },
    });
    expect(error).toBeInstanceOf(ThrottledError);
    expect((error as ThrottledError).retryAfterMs).toBe(30_000);
    expect(error.message).toContain('Too Many Requests');
  });

  it('429 with Retry-After sent twice (a gateway and the API) -> ThrottledError, longest wait', async () => {
    const error = await failWith({
      status: 429,
      body: 'Too Many Requests',
      headers: { 'retry-after': ['30', '10'] },
    });
    expect(error).toBeInstanceOf(ThrottledError);
    expect((error as ThrottledError).retryAfterMs).toBe(30_000);
  });

  it('429 with Retry-After as an HTTP date', async () => {
    const date = new Date(Date.now() + 120_000).toUTCString();
    const error = await failWith({
      status: 429,
      body: 'slow down',
      headers: { 'retry-after': date },
    });
    expect(error).toBeInstanceOf(ThrottledError);
    const ms = (error as ThrottledError).retryAfterMs;
    expect(ms).toBeGreaterThan(100_000);
    expect(ms).toBeLessThanOrEqual(120_000);
  });

  it('an unknown 4xx -> a generic PerksError with the status', async () => {
    const error = await failWith({ status: 418, body: "I'm a teapot" });
    expect(error.constructor).toBe(PerksError);
    expect(error.status).toBe(418);
  });

  it('501 -> UpstreamError, not retried', async () => {
    const error = await failWith({ status: 501, body: '' }, 3);
    expect(error).toBeInstanceOf(UpstreamError);
    expect(api?.apiRequests()).toHaveLength(1);
  });
});

describe('transport failures', () => {
  it('a connection reset -> TransportError keeping the code', async () => {
    const reset = Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' });
    api = fakeApi({
      api: sequence({ status: 0, error: reset }, { status: 200, body: { id: 'x' } }),
      client: { retry: { attempts: 1 } },
    });
    const error = await api.client.getReward(CONSUMER, REWARD_ID).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TransportError);
    expect(error).toMatchObject({ transportCode: 'ECONNRESET', status: undefined });
  });

  it('a reset then a good answer succeeds', async () => {
    const reset = Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' });
    const refused = Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' });
    const reward = (await import('./fake-api.js')).wireReward({ id: REWARD_ID });
    api = fakeApi({
      api: sequence(
        { status: 0, error: reset },
        { status: 0, error: refused },
        { status: 200, body: reward },
      ),
    });
    await expect(api.client.getReward(CONSUMER, REWARD_ID)).resolves.toMatchObject({
      id: REWARD_ID,
    });
    expect(api.apiRequests()).toHaveLength(3);
  });

  it('a timeout -> TransportError ETIMEDOUT, retried up to the attempts bound', async () => {
    const seen: string[] = [];
    api = fakeApi({
      prepend: (pool) => {
        pool
          .intercept({ path: (p) => p.includes('/rewards/'), method: 'GET' })
          .reply(200, '{}')
          .delay(2_000)
          .times(2);
      },
      client: {
        timeoutMs: 50,
        retry: { attempts: 2, minDelayMs: 1 },
        hooks: { onRequest: (e) => e.operation === 'getReward' && seen.push(e.error ?? 'ok') },
      },
    });
    const error = await api.client.getReward(CONSUMER, REWARD_ID).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TransportError);
    expect(error).toMatchObject({ transportCode: 'ETIMEDOUT' });
    expect(seen).toEqual(['TransportError', 'TransportError']);
  });
});

describe('2xx bodies that are not the expected shape', () => {
  it('HTML on a 200 -> ResponseShapeError, not a JSON crash', async () => {
    api = fakeApi({ api: () => ({ status: 200, body: '<html>maintenance</html>' }) });
    const error = await api.client.getReward(CONSUMER, REWARD_ID).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ResponseShapeError);
    expect((error as Error).message).toContain('not JSON');
  });

  it('a reward missing a field -> ResponseShapeError naming it', async () => {
    api = fakeApi({ api: () => ({ status: 200, body: { id: REWARD_ID } }) });
    const error = await api.client.getReward(CONSUMER, REWARD_ID).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ResponseShapeError);
    expect(error).toMatchObject({ path: 'amount' });
  });
});

describe('parseRetryAfter', () => {
  const now = () => Date.parse('2024-05-01T10:00:00Z');
  it.each([
    ['0', 0],
    ['2', 2_000],
    ['1.5', 1_500],
    ['Wed, 01 May 2024 10:00:30 GMT', 30_000],
    ['Wed, 01 May 2024 09:00:00 GMT', 0],
    [undefined, 5_000],
    ['soon', 5_000],
    ['-5', 5_000],
    ['99999999', 15 * 60_000],
    // Sent twice (undici gives an array): the longest wait.
    [['2', '30'], 30_000],
    [['Wed, 01 May 2024 10:00:30 GMT', '2'], 30_000],
  ])('%j -> %i ms', (value, ms) => {
    expect(parseRetryAfter(value, now)).toBe(ms);
  });
});
