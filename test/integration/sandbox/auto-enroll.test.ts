import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Sandbox, startSandbox } from '../../../src/sandbox/index.js';
import { apiClient, envelopeOf } from './http.js';

let sandbox: Sandbox;
let plain: Sandbox;
let api: Awaited<ReturnType<typeof apiClient>>;
let plainApi: Awaited<ReturnType<typeof apiClient>>;

beforeAll(async () => {
  sandbox = await startSandbox({ consumers: 1, rewardsPerConsumer: 3, autoEnroll: true });
  sandbox.state.addConsumer('held_not_enrolled', { enrolled: false });
  plain = await startSandbox({ consumers: 0 });
  api = await apiClient(sandbox);
  plainApi = await apiClient(plain);
});
afterAll(async () => {
  await sandbox.close();
  await plain.close();
});

describe('sandbox autoEnroll', () => {
  it('answers any consumer it does not hold with an empty first page, storing nothing', async () => {
    for (const id of ['c0000001', 'c0999999']) {
      const answer = await api.get(`/perks/consumers/${id}/rewards?per_page=1000&page=1`);
      expect(answer.status).toBe(200);
      expect(answer.json()).toEqual({ items: [], meta: { page: 1, per_page: 1000, total: 0 } });
    }
    expect(sandbox.state.listConsumers().map((c) => c.id)).toEqual([
      'sbx_0001',
      'held_not_enrolled',
    ]);
  });

  it('still serves held consumers as they are, enrolled or not', async () => {
    const held = await api.get('/perks/consumers/sbx_0001/rewards');
    expect((held.json() as { meta: { total: number } }).meta.total).toBe(3);
    const notEnrolled = await api.get('/perks/consumers/held_not_enrolled/rewards');
    expect(notEnrolled.status).toBe(404);
    expect(envelopeOf(notEnrolled).code).toBe('ERR-404-02');
  });

  it('still validates the consumer id and knows no reward of an unheld consumer', async () => {
    const bad = await api.get('/perks/consumers/x/rewards');
    expect(bad.status).toBe(400);
    const reward = await api.get(
      '/perks/consumers/c0000001/rewards/00000000-0000-4000-8000-000000000000',
    );
    expect(reward.status).toBe(404);
    expect(envelopeOf(reward).code).toBe('ERR-404-00');
  });

  it('creates an unheld consumer enrolled through the API', async () => {
    const created = await api.post('/perks/consumers', { id: 'fresh_one' });
    expect(created.status).toBe(201);
    expect(sandbox.state.isEnrolled('fresh_one')).toBe(true);
    expect((await api.post('/perks/consumers', { id: 'fresh_one' })).status).toBe(409);
  });

  it('is off by default: an unknown consumer is not enrolled', async () => {
    const answer = await plainApi.get('/perks/consumers/c0000001/rewards');
    expect(answer.status).toBe(404);
    expect(envelopeOf(answer).code).toBe('ERR-404-02');
  });
});
