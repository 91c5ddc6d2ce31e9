import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Sandbox, startSandbox } from '../../../src/sandbox/index.js';
import { apiClient, envelopeOf } from './http.js';

let sandbox: Sandbox;
let api: Awaited<ReturnType<typeof apiClient>>;

beforeAll(async () => {
  sandbox = await startSandbox({ consumers: 2, rewardsPerConsumer: 1 });
  api = await apiClient(sandbox);
});
afterAll(async () => {
  await sandbox.close();
});

describe('POST /perks/consumers', () => {
  it('creates a consumer: 201 {id}, enrolled from then on', async () => {
    const answer = await api.post('/perks/consumers', {
      id: 'new_consumer-1',
      extra_consents: ['BASIC', 'TARGETING'],
      removed_consents: ['WEB_ANALYTICS'],
    });
    expect(answer.status).toBe(201);
    expect(answer.json()).toEqual({ id: 'new_consumer-1' });
    expect(sandbox.state.isEnrolled('new_consumer-1')).toBe(true);
    expect(sandbox.state.enrolledConsumerIds()).toContain('new_consumer-1');
    const rewards = await api.get('/perks/consumers/new_consumer-1/rewards');
    expect(rewards.json()).toEqual({ items: [], meta: { page: 1, per_page: 50, total: 0 } });
  });

  it('answers 409 with errors null for an id already enrolled, and counts both', async () => {
    const before = sandbox.state.counters();
    expect((await api.post('/perks/consumers', { id: 'twice' })).status).toBe(201);
    const again = await api.post('/perks/consumers', { id: 'twice' });
    expect(again.status).toBe(409);
    expect(envelopeOf(again)).toMatchObject({
      code: 'ERR-409-00',
      title: 'Conflict',
      errors: null,
    });
    const seeded = await api.post('/perks/consumers', { id: 'sbx_0001' });
    expect(seeded.status).toBe(409);
    const after = sandbox.state.counters();
    expect(after.enrollmentsCreated - before.enrollmentsCreated).toBe(1);
    expect(after.enrollmentsConflicted - before.enrollmentsConflicted).toBe(2);
  });

  it('enrolls a known consumer that was not enrolled, keeping its rewards', async () => {
    sandbox.state.addConsumer('waiting', { enrolled: false, rewards: 4 });
    expect((await api.get('/perks/consumers/waiting/rewards')).status).toBe(404);
    expect((await api.post('/perks/consumers', { id: 'waiting' })).status).toBe(201);
    const page = (await api.get('/perks/consumers/waiting/rewards')).json() as {
      meta: { total: number };
    };
    expect(page.meta.total).toBe(4);
  });

  it('generates rewards for newly enrolled consumers when rewardsOnEnroll is set', async () => {
    const generous = await startSandbox({ rewardsOnEnroll: 5 });
    try {
      const client = await apiClient(generous);
      expect((await client.post('/perks/consumers', { id: 'lucky' })).status).toBe(201);
      const page = (await client.get('/perks/consumers/lucky/rewards')).json();
      expect(page).toMatchObject({ meta: { total: 5 } });
    } finally {
      await generous.close();
    }
  });

  it('reports every invalid field with its loc path', async () => {
    const answer = await api.post('/perks/consumers', {
      id: 'bad id!',
      extra_consents: ['BASIC', 'NOT_A_CONSENT', 'STATISTICS', 7],
      removed_consents: 'BASIC',
    });
    expect(answer.status).toBe(400);
    const body = envelopeOf(answer);
    expect(body.code).toBe('ERR-400-00');
    expect(body.title).toBe('Bad Request');
    expect(body.errors?.map((e) => e.loc)).toEqual([
      ['id'],
      ['extra_consents', 1],
      ['extra_consents', 3],
      ['removed_consents'],
    ]);
    for (const item of body.errors ?? []) {
      expect(typeof item.msg).toBe('string');
      expect(typeof item.type).toBe('string');
    }
  });

  it.each([
    [{}, 'missing'],
    [{ id: 'x' }, 'string_too_short'],
    [{ id: 'a'.repeat(101) }, 'string_too_long'],
    [{ id: 42 }, 'string_type'],
    [{ id: 'é-accent' }, 'string_pattern_mismatch'],
  ])('rejects the id of %j (%s)', async (body, type) => {
    const answer = await api.post('/perks/consumers', body);
    expect(answer.status).toBe(400);
    expect(envelopeOf(answer).errors).toEqual([{ loc: ['id'], msg: expect.any(String), type }]);
  });

  it('accepts ids of exactly 2 and 100 characters', async () => {
    expect((await api.post('/perks/consumers', { id: 'ab' })).status).toBe(201);
    expect((await api.post('/perks/consumers', { id: 'Z'.repeat(100) })).status).toBe(201);
  });

  it('answers malformed JSON with 400 and errors []', async () => {
    const answer = await api.post('/perks/consumers', '{"id": "abc",');
    expect(answer.status).toBe(400);
    expect(envelopeOf(answer)).toMatchObject({ code: 'ERR-400-00', errors: [] });
  });

  it('rejects a body that is not an object', async () => {
    const answer = await api.post('/perks/consumers', '["abc"]');
    expect(answer.status).toBe(400);
    expect(envelopeOf(answer).errors?.[0]?.loc).toEqual([]);
  });
});
