import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type Sandbox, startSandbox } from '../../../src/sandbox/index.js';
import { apiClient, basicAuth, call, envelopeOf } from './http.js';

let sandbox: Sandbox;
let api: Awaited<ReturnType<typeof apiClient>>;
const list = (id = 'sbx_0001') => `/perks/consumers/${id}/rewards`;

beforeAll(async () => {
  sandbox = await startSandbox({ consumers: 2, rewardsPerConsumer: 3 });
  api = await apiClient(sandbox);
});
afterEach(() => {
  sandbox.faults.clear();
  sandbox.state.setRateLimit(undefined);
  sandbox.state.setLatency(0);
});
afterAll(async () => {
  await sandbox.close();
});

function token() {
  return call(`${sandbox.baseUrl}/tokens`, {
    method: 'POST',
    headers: {
      authorization: basicAuth(sandbox.clientId, sandbox.clientSecret),
      'x-api-version': '2.0.0',
    },
  });
}

describe('injected faults', () => {
  it('replaces exactly the next K responses with a status and the envelope', async () => {
    sandbox.faults.inject({ route: 'listRewards', count: 2, kind: 'status', status: 503 });
    for (let i = 0; i < 2; i++) {
      const answer = await api.get(list());
      expect(answer.status).toBe(503);
      expect(envelopeOf(answer).code).toBe('ERR-503-00');
    }
    expect((await api.get(list())).status).toBe(200);
    expect(sandbox.faults.list()).toEqual([]);
  });

  it.each([500, 502, 504])('sends a %i envelope', async (status) => {
    sandbox.faults.inject({ route: '*', count: 1, kind: 'status', status });
    const answer = await api.get(list());
    expect(answer.status).toBe(status);
    expect(envelopeOf(answer).status).toBe(status);
  });

  it('only fires on its route', async () => {
    sandbox.faults.inject({ route: 'getReward', count: 1, kind: 'html502' });
    expect((await api.get(list())).status).toBe(200);
    const [reward] = sandbox.state.rewardsOf('sbx_0001');
    const answer = await api.get(`${list()}/${reward?.id}`);
    expect(answer.status).toBe(502);
    expect(answer.headers['content-type']).toBe('text/html');
    expect(answer.text).toContain('<html>');
    expect((await api.get(`${list()}/${reward?.id}`)).status).toBe(200);
  });

  it('only fires for its consumer, in the path or the enrollment body', async () => {
    sandbox.faults.inject({
      route: '*',
      consumerId: 'sbx_0002',
      count: 1,
      kind: 'status',
      status: 500,
    });
    sandbox.faults.inject({
      route: 'enroll',
      consumerId: 'victim',
      count: 1,
      kind: 'empty',
      status: 504,
    });
    expect((await api.get(list('sbx_0001'))).status).toBe(200);
    expect((await api.post('/perks/consumers', { id: 'bystander' })).status).toBe(201);
    expect((await token()).status).toBe(200);
    expect((await api.get(list('sbx_0002'))).status).toBe(500);
    expect((await api.get(list('sbx_0002'))).status).toBe(200);
    const empty = await api.post('/perks/consumers', { id: 'victim' });
    expect(empty.status).toBe(504);
    expect(empty.text).toBe('');
    expect(sandbox.state.isEnrolled('victim')).toBe(false);
    expect((await api.post('/perks/consumers', { id: 'victim' })).status).toBe(201);
  });

  it('throttles the token call with a text/plain 429 and Retry-After, minting nothing', async () => {
    const before = sandbox.state.counters().tokensMinted;
    sandbox.faults.inject({ route: 'token', count: 1, kind: 'throttle429', retryAfterSeconds: 7 });
    const answer = await token();
    expect(answer.status).toBe(429);
    expect(answer.headers['content-type']).toBe('text/plain');
    expect(answer.headers['retry-after']).toBe('7');
    expect(() => answer.json()).toThrow();
    expect(sandbox.state.counters().tokensMinted).toBe(before);
    expect((await token()).status).toBe(200);
  });

  it('sends empty-bodied 401, 503 and 504', async () => {
    sandbox.faults.inject({ route: '*', count: 1, kind: 'empty401' });
    sandbox.faults.inject({ route: '*', count: 1, kind: 'empty' });
    sandbox.faults.inject({ route: '*', count: 1, kind: 'empty', status: 504 });
    for (const status of [401, 503, 504]) {
      const answer = await api.get(list());
      expect(answer.status).toBe(status);
      expect(answer.text).toBe('');
      expect(answer.headers['content-type']).toBeUndefined();
    }
  });

  it('resets the connection, logging status 0', async () => {
    sandbox.faults.inject({ route: 'listRewards', count: 1, kind: 'reset' });
    await expect(api.get(list())).rejects.toThrow();
    expect(sandbox.state.requestLog().at(-1)).toMatchObject({ status: 0, consumerId: 'sbx_0001' });
    expect((await api.get(list())).status).toBe(200);
  });

  it('answers 200 with a body that is not JSON, or JSON of the wrong shape', async () => {
    sandbox.faults.inject({ route: 'listRewards', count: 1, kind: 'malformed' });
    sandbox.faults.inject({
      route: 'listRewards',
      count: 1,
      kind: 'malformed',
      body: 'wrong-shape',
    });
    const notJson = await api.get(list());
    expect(notJson.status).toBe(200);
    expect(() => notJson.json()).toThrow();
    const wrong = await api.get(list());
    expect(wrong.status).toBe(200);
    expect(Array.isArray((wrong.json() as { items: unknown }).items)).toBe(false);
  });

  it('a malformed 2xx on enrollment still applies the write (only the body is mangled)', async () => {
    sandbox.faults.inject({ route: 'enroll', count: 1, kind: 'malformed' });
    const mangled = await api.post('/perks/consumers', { id: 'mangled_one' });
    expect(mangled.status).toBe(201);
    expect(() => mangled.json()).toThrow();
    expect(sandbox.state.isEnrolled('mangled_one')).toBe(true);
    expect((await api.post('/perks/consumers', { id: 'mangled_one' })).status).toBe(409);
  });

  it('delays a POST past the client timeout yet applies the write', async () => {
    sandbox.faults.inject({ route: 'enroll', count: 1, kind: 'delay', delayMs: 400 });
    await expect(
      api.post('/perks/consumers', { id: 'slow_one' }, { timeoutMs: 100 }),
    ).rejects.toThrow();
    expect(sandbox.state.isEnrolled('slow_one')).toBe(true);
    expect((await api.post('/perks/consumers', { id: 'slow_one' })).status).toBe(409);
  });

  it('delays without applying the write, then answers an empty 504', async () => {
    sandbox.faults.inject({
      route: 'enroll',
      count: 2,
      kind: 'delay',
      delayMs: 150,
      applyWrite: false,
    });
    await expect(
      api.post('/perks/consumers', { id: 'lost_one' }, { timeoutMs: 50 }),
    ).rejects.toThrow();
    const gaveUp = await api.post('/perks/consumers', { id: 'lost_one' });
    expect(gaveUp.status).toBe(504);
    expect(gaveUp.text).toBe('');
    expect(sandbox.state.isEnrolled('lost_one')).toBe(false);
    expect((await api.post('/perks/consumers', { id: 'lost_one' })).status).toBe(201);
  });

  it('delays a read and still answers it', async () => {
    sandbox.faults.inject({ route: 'listRewards', count: 1, kind: 'delay', delayMs: 50 });
    expect((await api.get(list())).status).toBe(200);
  });

  it('rejects an invalid fault without changing the active ones', () => {
    expect(() =>
      sandbox.faults.inject({ route: '*', count: 1, kind: 'status', status: 418 }),
    ).toThrow();
    expect(() => sandbox.faults.inject({ route: '*', count: 1, kind: 'delay' })).toThrow();
    expect(() => sandbox.faults.inject({ route: '*', count: 0, kind: 'reset' })).toThrow();
    expect(sandbox.faults.list()).toEqual([]);
  });
});

describe('rate limit and latency', () => {
  it('answers text/plain 429 with Retry-After above the per-token rate', async () => {
    sandbox.state.setRateLimit(3);
    const answers = await Promise.all(Array.from({ length: 12 }, () => api.get(list())));
    const throttled = answers.filter((a) => a.status === 429);
    // Twelve requests fit in at most two one-second windows: at most 6 pass.
    expect(throttled.length).toBeGreaterThanOrEqual(6);
    expect(answers.filter((a) => a.status === 200).length).toBeGreaterThanOrEqual(3);
    for (const answer of throttled) {
      expect(answer.headers['content-type']).toBe('text/plain');
      expect(Number(answer.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    }
    // Another token has its own budget.
    const other = await apiClient(sandbox);
    expect((await other.get(list())).status).toBe(200);
    sandbox.state.setRateLimit(undefined);
    const after = await Promise.all(Array.from({ length: 12 }, () => api.get(list())));
    expect(after.every((a) => a.status === 200)).toBe(true);
  });

  it('serves correct responses with added latency', async () => {
    sandbox.state.setLatency(20);
    const answer = await api.get(`${list()}?per_page=1`);
    expect(answer.status).toBe(200);
    expect(answer.json()).toMatchObject({ meta: { per_page: 1, total: 3 } });
  });
});
