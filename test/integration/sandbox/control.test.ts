import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { faultSchema } from '../../../src/sandbox/faults.js';
import {
  loadScenario,
  type RewardJson,
  type Sandbox,
  startSandbox,
} from '../../../src/sandbox/index.js';
import { apiClient, basicAuth, call, fetchToken } from './http.js';

let sandbox: Sandbox;
let control: (
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE',
  path: string,
  body?: unknown,
) => ReturnType<typeof call>;

beforeAll(async () => {
  sandbox = await startSandbox({ consumers: 3, rewardsPerConsumer: 2 });
  control = (method, path, body) =>
    call(`${sandbox.baseUrl}/_sandbox/${path}`, {
      method,
      headers: { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
});
afterAll(async () => {
  await sandbox.close();
});

describe('control API', () => {
  it('reports health and lists consumers', async () => {
    expect((await control('GET', 'health')).json()).toEqual({ status: 'ok' });
    expect((await control('GET', 'consumers')).json()).toEqual([
      { id: 'sbx_0001', enrolled: true, rewards: 2 },
      { id: 'sbx_0002', enrolled: true, rewards: 2 },
      { id: 'sbx_0003', enrolled: true, rewards: 2 },
    ]);
  });

  it('adds consumers and rewards, moves and deletes a reward', async () => {
    const added = await control('POST', 'consumers', { id: 'ctl_a', rewards: 2 });
    expect(added.status).toBe(201);
    expect((await control('POST', 'consumers', { id: 'ctl_a' })).status).toBe(409);
    expect((await control('POST', 'consumers', { id: 'ctl_b', enrolled: false })).status).toBe(201);
    expect(sandbox.state.isEnrolled('ctl_b')).toBe(false);

    const generated = await control('POST', 'consumers/ctl_a/rewards', { count: 3 });
    expect((generated.json() as { items: RewardJson[] }).items).toHaveLength(3);
    const explicit = await control('POST', 'consumers/ctl_a/rewards', {
      items: [{ amount: '+0012.50', type: 'VOUCHER' }],
    });
    const [item] = (explicit.json() as { items: RewardJson[] }).items;
    expect(item).toMatchObject({ amount: '+0012.50', type: 'VOUCHER' });

    const path = `consumers/ctl_a/rewards/${item?.id}`;
    for (const [status, consumerStatus] of [
      ['PAID_IN', 'POOLED'],
      ['PAID_OUT', 'PAID'],
    ]) {
      const moved = await control('PATCH', path, { status });
      expect(moved.json()).toMatchObject({ status, consumer_status: consumerStatus });
    }
    const odd = await control('PATCH', path, { status: 'CANCELLED', consumer_status: 'VOID' });
    expect(odd.json()).toMatchObject({ status: 'CANCELLED', consumer_status: 'VOID' });

    const listed = (await control('GET', 'consumers/ctl_a/rewards')).json() as {
      items: RewardJson[];
    };
    expect(listed.items).toHaveLength(6);
    expect(listed.items.find((r) => r.id === item?.id)?.status).toBe('CANCELLED');
    expect((await control('DELETE', path)).status).toBe(204);
    expect((await control('DELETE', path)).status).toBe(404);
    expect(sandbox.state.rewardsOf('ctl_a')).toHaveLength(5);
  });

  it('answers 404 for unknown consumers and routes, 400 for bad bodies', async () => {
    expect((await control('GET', 'consumers/nobody/rewards')).status).toBe(404);
    expect((await control('GET', 'nothing-here')).status).toBe(404);
    expect((await control('POST', 'consumers', { id: 5 })).status).toBe(400);
    expect((await control('POST', 'faults', { route: 'x', count: 1, kind: 'reset' })).status).toBe(
      400,
    );
  });

  it('names the allowed kinds for an unknown one, alone or in a list', async () => {
    const allowed =
      'Invalid option: expected one of "status"|"html502"|"throttle429"|"empty401"|"empty"|"delay"|"reset"|"malformed"';
    const one = await control('POST', 'faults', { route: 'enroll', count: 1, kind: 'html503' });
    expect([one.status, one.json()]).toEqual([400, { error: `kind: ${allowed}` }]);
    const list = await control('POST', 'faults', [
      { route: 'enroll', count: 1, kind: 'reset' },
      { route: 'enroll', count: 1, kind: 'slow' },
    ]);
    expect([list.status, list.json()]).toEqual([400, { error: `1.kind: ${allowed}` }]);
  });

  it('takes the example of each kind that docs/commands.md shows', async () => {
    const docs = await readFile(new URL('../../../docs/commands.md', import.meta.url), 'utf8');
    const examples = [...docs.matchAll(/^\| `(\w+)` \| .+ \| `(\{.+\})` \|$/gm)];
    expect(examples.map(([, kind]) => kind)).toEqual(faultSchema.shape.kind.options);
    for (const [, kind, json] of examples) {
      const fault = JSON.parse(json ?? '') as { kind: string };
      expect(fault.kind).toBe(kind);
      expect((await control('POST', 'faults', fault)).status, kind).toBe(204);
    }
    await control('DELETE', 'faults');
  });

  it('sets, lists and clears faults; a bad list changes nothing', async () => {
    const bad = await control('POST', 'faults', [
      { route: 'enroll', count: 1, kind: 'reset' },
      { route: 'enroll', count: 1, kind: 'status', status: 418 },
    ]);
    expect(bad.status).toBe(400);
    expect((await control('GET', 'faults')).json()).toEqual([]);
    const ok = await control('POST', 'faults', [
      { route: 'listRewards', count: 2, kind: 'status', status: 502 },
      { route: 'getReward', consumerId: 'sbx_0002', count: 1, kind: 'html502' },
    ]);
    expect(ok.status).toBe(204);
    const api = await apiClient(sandbox);
    expect((await api.get('/perks/consumers/sbx_0001/rewards')).status).toBe(502);
    expect((await control('GET', 'faults')).json()).toMatchObject([
      { route: 'listRewards', remaining: 1 },
      { route: 'getReward', remaining: 1 },
    ]);
    expect((await control('DELETE', 'faults')).status).toBe(204);
    expect((await api.get('/perks/consumers/sbx_0001/rewards')).status).toBe(200);
  });

  it('changes latency and rate limit through settings', async () => {
    const set = await control('PUT', 'settings', { latencyMs: 5, rateLimitPerSecond: 100 });
    expect(set.json()).toEqual({ latencyMs: 5, rateLimitPerSecond: 100, concurrencyLimit: null });
    const unset = await control('PUT', 'settings', { latencyMs: 0, rateLimitPerSecond: null });
    expect(unset.json()).toEqual({
      latencyMs: 0,
      rateLimitPerSecond: null,
      concurrencyLimit: null,
    });
  });

  it('refuses requests past its concurrency limit at once with a 429, and counts the peak', async () => {
    const capped = await startSandbox({ consumers: 1, concurrencyLimit: 2, latencyMs: 200 });
    try {
      const api = await apiClient(capped);
      const answers = await Promise.all(
        Array.from({ length: 4 }, () => api.get('/perks/consumers/sbx_0001/rewards')),
      );
      expect(answers.map((a) => a.status).sort()).toEqual([200, 200, 429, 429]);
      const refused = answers.find((a) => a.status === 429);
      expect(refused?.headers).toMatchObject({ 'retry-after': '0', 'content-type': 'text/plain' });
      expect(capped.state.counters()).toMatchObject({ peakInFlight: 2, overConcurrencyLimit: 2 });
      // Answered, the two are out: the next two get through.
      const again = await Promise.all(
        [1, 2].map(() => api.get('/perks/consumers/sbx_0001/rewards')),
      );
      expect(again.map((a) => a.status)).toEqual([200, 200]);
    } finally {
      await capped.close();
    }
  });

  it('mints tokens for other programs and scopes', async () => {
    const minted = await control('POST', 'tokens', { scopes: ['LOYALTIES'] });
    const token = (minted.json() as { access_token: string }).access_token;
    const answer = await call(`${sandbox.baseUrl}/perks/consumers/sbx_0001/rewards`, {
      headers: { authorization: `Bearer ${token}`, 'x-api-version': '2.0.0' },
    });
    expect(answer.status).toBe(403);
  });

  it('logs requests and counts them, never recording a token or secret', async () => {
    const token = await fetchToken(sandbox);
    const api = await apiClient(sandbox);
    await api.get('/perks/consumers/sbx_0003/rewards?per_page=1');
    await api.post('/perks/consumers', { id: 'logged_one' });
    await api.post('/perks/consumers', { id: 'logged_one' });
    const log = (await control('GET', 'requests')).json() as { items: object[] };
    const text = JSON.stringify(log);
    expect(text).not.toContain(token);
    expect(text).not.toContain(sandbox.clientSecret);
    expect(text).not.toContain(basicAuth(sandbox.clientId, sandbox.clientSecret).slice(6));
    expect(log.items.slice(-3)).toMatchObject([
      {
        method: 'GET',
        path: '/perks/consumers/sbx_0003/rewards?per_page=1',
        status: 200,
        consumerId: 'sbx_0003',
      },
      { method: 'POST', path: '/perks/consumers', status: 201, consumerId: 'logged_one' },
      { method: 'POST', path: '/perks/consumers', status: 409, consumerId: 'logged_one' },
    ]);
    expect(log.items.some((e) => (e as { path: string }).path === '/tokens')).toBe(true);
    const counters = (await control('GET', 'counters')).json();
    expect(counters).toMatchObject({ enrollmentsCreated: 1, enrollmentsConflicted: 1 });
    expect((counters as { requests: Record<string, number> }).requests.token).toBeGreaterThan(0);
  });

  it('resets to the seeded data with no faults, counters or log', async () => {
    const seeded = sandbox.state.rewardsOf('sbx_0001');
    sandbox.faults.inject({ route: '*', count: 5, kind: 'reset' });
    expect((await control('POST', 'reset')).status).toBe(204);
    expect(sandbox.state.listConsumers().map((c) => c.id)).toEqual([
      'sbx_0001',
      'sbx_0002',
      'sbx_0003',
    ]);
    expect(sandbox.state.rewardsOf('sbx_0001')).toEqual(seeded);
    expect(sandbox.faults.list()).toEqual([]);
    expect(sandbox.state.requestLog()).toEqual([]);
    expect(sandbox.state.counters().tokensMinted).toBe(0);
  });
});

describe('scenario files', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sandbox-scenario-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('starts with the scenario consumers, settings and faults', async () => {
    const file = join(dir, 'drill.json');
    await writeFile(
      file,
      JSON.stringify({
        consumers: [
          { id: 'alice', rewards: 5 },
          { id: 'bob', enrolled: false },
        ],
        rateLimitPerSecond: 1000,
        faults: [
          { route: 'listRewards', consumerId: 'alice', count: 1, kind: 'status', status: 503 },
        ],
      }),
    );
    const scenario = await loadScenario(file);
    const drilled = await startSandbox({ scenario });
    try {
      expect(drilled.state.listConsumers()).toEqual([
        { id: 'alice', enrolled: true, rewards: 5 },
        { id: 'bob', enrolled: false, rewards: 0 },
      ]);
      const api = await apiClient(drilled);
      expect((await api.get('/perks/consumers/alice/rewards')).status).toBe(503);
      expect((await api.get('/perks/consumers/alice/rewards')).status).toBe(200);
    } finally {
      await drilled.close();
    }
  });

  it('names the file and the problem when the scenario is invalid', async () => {
    const file = join(dir, 'bad.json');
    await writeFile(file, JSON.stringify({ faults: [{ route: 'token', kind: 'reset' }] }));
    await expect(loadScenario(file)).rejects.toThrow(/bad\.json: faults\.0\.count/);
    await expect(loadScenario(join(dir, 'missing.json'))).rejects.toThrow(/ENOENT/);
  });
});
