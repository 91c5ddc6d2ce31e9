import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { redactedPaths } from '../../../src/ops/logger.js';
import {
  InvalidInputError,
  PerksError,
  ResponseShapeError,
  ResponseTooLargeError,
  ValidationError,
} from '../../../src/perks/errors.js';
import type { Consent } from '../../../src/perks/schemas.js';
import {
  CONSUMER,
  envelope,
  type FakeResponse,
  fakeApi,
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

describe('enrollConsumer', () => {
  it('POSTs the snake_case body and answers created', async () => {
    api = fakeApi({
      api: (req) => ({ status: 201, body: { id: JSON.parse(req.body ?? '{}').id } }),
    });
    const result = await api.client.enrollConsumer({
      id: CONSUMER,
      extraConsents: ['TARGETING', 'STATISTICS'],
      removedConsents: ['WEB_ANALYTICS'],
    });
    expect(result).toEqual({ outcome: 'created' });
    const [req] = api.apiRequests();
    expect(req?.method).toBe('POST');
    expect(req?.url.pathname).toBe('/programs/acme/perks/consumers');
    expect(req?.headers['content-type']).toBe('application/json');
    expect(JSON.parse(req?.body ?? '')).toEqual({
      id: CONSUMER,
      extra_consents: ['TARGETING', 'STATISTICS'],
      removed_consents: ['WEB_ANALYTICS'],
    });
  });

  it('sends only the id when no consents are given', async () => {
    api = fakeApi({ api: () => ({ status: 200, body: { id: CONSUMER } }) });
    await api.client.enrollConsumer({ id: CONSUMER });
    expect(JSON.parse(api.apiRequests()[0]?.body ?? '')).toEqual({ id: CONSUMER });
  });

  it('409 means already enrolled', async () => {
    api = fakeApi({ api: () => envelope(409, 'ERR-409-01', 'Consumer already exists') });
    await expect(api.client.enrollConsumer({ id: CONSUMER })).resolves.toEqual({
      outcome: 'already_enrolled',
    });
    expect(api.apiRequests()).toHaveLength(1);
  });

  it('a 2xx naming another consumer is an answer of the wrong shape, naming the field', async () => {
    api = fakeApi({ api: () => ({ status: 201, body: { id: 'someone_else' } }) });
    await expect(api.client.enrollConsumer({ id: CONSUMER })).rejects.toMatchObject({
      name: 'ResponseShapeError',
      path: 'id',
    });
  });

  it('a POST whose connection dropped is retried; the 409 that follows counts as success', async () => {
    const reset = Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' });
    api = fakeApi({
      api: sequence({ status: 0, error: reset }, envelope(409, 'ERR-409-01', 'Exists')),
    });
    await expect(api.client.enrollConsumer({ id: CONSUMER })).resolves.toEqual({
      outcome: 'already_enrolled',
    });
    expect(api.apiRequests()).toHaveLength(2);
  });

  it('a timed-out POST is retried; the 409 that follows counts as success', async () => {
    const seen: string[] = [];
    api = fakeApi({
      // The first POST is applied upstream but answers too late; the retry finds it done.
      prepend: (pool) => {
        pool
          .intercept({ path: (p) => p.endsWith('/perks/consumers'), method: 'POST' })
          .reply(201, '{}')
          .delay(2_000)
          .times(1);
      },
      api: () => envelope(409, 'ERR-409-01', 'Exists'),
      client: {
        timeoutMs: 50,
        retry: { attempts: 2, minDelayMs: 1 },
        hooks: { onRequest: (e) => e.operation === 'enrollConsumer' && seen.push(e.error ?? 'ok') },
      },
    });
    await expect(api.client.enrollConsumer({ id: CONSUMER })).resolves.toEqual({
      outcome: 'already_enrolled',
    });
    // The first attempt ended in the client's timeout (TransportError), the retry in the 409.
    expect(seen).toEqual(['TransportError', 'ConflictError']);
  });

  it('400 from the API -> ValidationError carrying loc', async () => {
    const errors = [{ loc: ['extra_consents', 0], msg: 'not allowed', type: 'enum' }];
    api = fakeApi({ api: () => envelope(400, 'ERR-400-00', 'Bad Request', { errors }) });
    const error = await api.client.enrollConsumer({ id: CONSUMER }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ValidationError);
    expect((error as ValidationError).errors?.[0]?.loc).toEqual(['extra_consents', 0]);
  });

  it.each([
    ['201 {} (no id)', { status: 201, body: {} }],
    ['204 with no body', { status: 204, body: '' }],
    ['200 with another shape', { status: 200, body: { consumer_id: CONSUMER } }],
  ])('any 2xx is created, whatever its body: %s', async (_name, response) => {
    // The spec fixes neither the success status nor the body; the consumer exists either way.
    api = fakeApi({ api: () => response });
    await expect(api.client.enrollConsumer({ id: CONSUMER })).resolves.toEqual({
      outcome: 'created',
    });
    expect(api.apiRequests()).toHaveLength(1);
  });

  it.each([
    ['a short id', { id: 'a' }, 'id'],
    ['an id with a slash', { id: 'a/b' }, 'id'],
    [
      'an unknown consent',
      { id: CONSUMER, extraConsents: ['BASIC', 'MARKETING'] },
      'extraConsents[1]',
    ],
    [
      'a consent both added and removed',
      { id: CONSUMER, extraConsents: ['BASIC'], removedConsents: ['BASIC'] },
      'removedConsents',
    ],
  ])('rejects %s before any request', async (_name, input, field) => {
    api = fakeApi({ api: () => ({ status: 201, body: { id: CONSUMER } }) });
    const error = await api.client
      .enrollConsumer(input as { id: string; extraConsents?: Consent[] })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidInputError);
    expect(error).toMatchObject({ field, operation: 'enrollConsumer' });
    expect(api.requests).toHaveLength(0);
  });
});

describe('getReward', () => {
  it('GETs the encoded path and parses the reward', async () => {
    const wire = wireReward({ id: REWARD_ID, amount: '+0012.50' });
    api = fakeApi({ api: () => ({ status: 200, body: wire }) });
    const reward = await api.client.getReward('User-1_x', REWARD_ID);
    expect(reward).toMatchObject({ id: REWARD_ID, amount: '12.50', raw: wire });
    expect(api.apiRequests()[0]?.url.pathname).toBe(
      `/programs/acme/perks/consumers/User-1_x/rewards/${REWARD_ID}`,
    );
  });

  it.each([
    ['consumerId', 'a b', REWARD_ID],
    ['rewardId', CONSUMER, 'not-a-uuid'],
    ['rewardId', CONSUMER, `${REWARD_ID}/../x`],
  ])('rejects a bad %s before any request', async (field, consumerId, rewardId) => {
    api = fakeApi();
    const error = await api.client.getReward(consumerId, rewardId).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidInputError);
    expect(error).toMatchObject({ field });
    expect(api.requests).toHaveLength(0);
  });
});

describe('response size limit', () => {
  it('destroys a 2xx body past maxResponseBytes and fails the call', async () => {
    const big = { ...wireReward({ id: REWARD_ID }), padding: 'x'.repeat(20_000) };
    api = fakeApi({ api: () => ({ status: 200, body: big }), client: { maxResponseBytes: 4_096 } });
    const error = await api.client.getReward(CONSUMER, REWARD_ID).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ResponseTooLargeError);
    expect(error).toBeInstanceOf(ResponseShapeError);
    expect(api.apiRequests()).toHaveLength(1);
  });

  it('accepts a body exactly at the limit', async () => {
    const body = JSON.stringify(wireReward({ id: REWARD_ID }));
    api = fakeApi({
      api: () => ({ status: 200, body, headers: { 'content-type': 'application/json' } }),
      client: { maxResponseBytes: Buffer.byteLength(body) },
    });
    await expect(api.client.getReward(CONSUMER, REWARD_ID)).resolves.toMatchObject({
      id: REWARD_ID,
    });
  });
});

describe('secrets', () => {
  it('never appear in an error message or a log line', async () => {
    const lines: string[] = [];
    const stream = new Writable({
      write(chunk, _encoding, done) {
        lines.push(String(chunk));
        done();
      },
    });
    const logger = pino(
      { level: 'trace', redact: { paths: redactedPaths, censor: '[redacted]' } },
      stream,
    );
    const errors: unknown[] = [];
    let echoedToken = '';
    const echo = (status: number): FakeResponse => ({
      status,
      body: `<html>denied for ${echoedToken} and ${SECRET}</html>`,
    });
    const reset = Object.assign(new Error(`reset while sending ${SECRET}`), { code: 'ECONNRESET' });
    api = fakeApi({
      api: (req) => {
        echoedToken = req.headers.authorization ?? '';
        return scripted.shift() ?? { status: 200, body: wireReward({ id: REWARD_ID }) };
      },
      client: { logger },
    });
    const scripted: FakeResponse[] = [
      echo(401),
      echo(401),
      echo(502),
      echo(502),
      echo(502),
      echo(502),
      echo(400),
      echo(429),
      { status: 0, error: reset },
      { status: 0, error: reset },
      { status: 0, error: reset },
      { status: 0, error: reset },
    ];
    for (let i = 0; i < 6; i++) {
      await api.client.getReward(CONSUMER, REWARD_ID).catch((e: unknown) => errors.push(e));
    }
    expect(errors.length).toBeGreaterThanOrEqual(4);
    const texts = [
      ...errors.map((e) =>
        e instanceof PerksError ? `${e.message} ${e.title} ${e.stack}` : String(e),
      ),
      ...lines,
    ].join('\n');
    expect(texts).toContain('HTTP 401');
    for (const leak of [
      SECRET,
      ...api.minted,
      Buffer.from(`cli_test:${SECRET}`).toString('base64'),
    ]) {
      expect(texts).not.toContain(leak);
    }
    expect(lines.length).toBeGreaterThan(0);
  });
});

describe('close', () => {
  it('rejects calls made after close without sending anything', async () => {
    api = fakeApi({ api: () => ({ status: 200, body: wireReward({ id: REWARD_ID }) }) });
    await api.client.close();
    await expect(api.client.getReward(CONSUMER, REWARD_ID)).rejects.toThrow(/closed/);
    expect(api.requests).toHaveLength(0);
  });
});

describe('linkSignals', () => {
  it('detaches from a long-lived source once disposed', async () => {
    const { EventEmitter } = await import('node:events');
    const { linkSignals } = await import('../../../src/signals.js');
    const shutdown = new AbortController();
    for (let i = 0; i < 50; i++) linkSignals([shutdown.signal], 1_000).dispose();
    expect(EventEmitter.getEventListeners(shutdown.signal, 'abort')).toHaveLength(0);
    const live = linkSignals([shutdown.signal]);
    shutdown.abort(new Error('stop'));
    expect(live.signal.aborted).toBe(true);
    expect(live.timedOut()).toBe(false);
    live.dispose();
  });

  it('aborts on its deadline and says so', async () => {
    const { linkSignals } = await import('../../../src/signals.js');
    const linked = linkSignals([], 1);
    await new Promise((resolve) => linked.signal.addEventListener('abort', resolve));
    expect(linked.timedOut()).toBe(true);
    linked.dispose();
  });
});
