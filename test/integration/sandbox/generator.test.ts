import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AMOUNT_PATTERN as amountPattern } from '../../../src/perks/schemas.js';
import { type RewardJson, type Sandbox, startSandbox } from '../../../src/sandbox/index.js';
import { apiClient } from './http.js';

const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const rfc3339Z = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/;

let first: Sandbox;
let second: Sandbox;
let other: Sandbox;

function everyReward(sandbox: Sandbox): RewardJson[] {
  return sandbox.state.enrolledConsumerIds().flatMap((id) => sandbox.state.rewardsOf(id));
}

beforeAll(async () => {
  const options = { consumers: 40, seed: 7, rewardsPerConsumer: { min: 0, max: 30 } };
  [first, second, other] = await Promise.all([
    startSandbox(options),
    startSandbox(options),
    startSandbox({ ...options, seed: 8 }),
  ]);
});
afterAll(async () => {
  await Promise.all([first.close(), second.close(), other.close()]);
});

describe('the seeded generator', () => {
  it('gives the same data for the same seed, other data for another', async () => {
    expect(first.state.enrolledConsumerIds()).toEqual(second.state.enrolledConsumerIds());
    expect(first.state.enrolledConsumerIds().slice(0, 2)).toEqual(['sbx_0001', 'sbx_0002']);
    expect(everyReward(first)).toEqual(everyReward(second));
    expect(everyReward(first)).not.toEqual(everyReward(other));
    // The same over HTTP, byte for byte.
    const [a, b] = await Promise.all([apiClient(first), apiClient(second)]);
    const path = '/perks/consumers/sbx_0003/rewards?per_page=1000&sort=-executed_at';
    expect((await a.get(path)).text).toBe((await b.get(path)).text);
  });

  it('keeps added rewards deterministic too', () => {
    expect(first.state.addRewards('sbx_0005', 3)).toEqual(second.state.addRewards('sbx_0005', 3));
  });

  it('draws reward counts within the range, and honours a fixed count', async () => {
    const counts = first.state.listConsumers().map((c) => c.rewards);
    expect(Math.min(...counts)).toBeGreaterThanOrEqual(0);
    expect(Math.max(...counts)).toBeLessThanOrEqual(33); // 30 plus the 3 added above
    expect(new Set(counts).size).toBeGreaterThan(5);
    const fixed = await startSandbox({ consumers: 3, rewardsPerConsumer: 4 });
    try {
      expect(fixed.state.listConsumers().map((c) => c.rewards)).toEqual([4, 4, 4]);
    } finally {
      await fixed.close();
    }
  });

  it('writes amounts in every form the spec pattern admits', () => {
    const amounts = everyReward(first).map((r) => r.amount);
    for (const amount of amounts) expect(amount).toMatch(amountPattern);
    expect(amounts.some((a) => /^\d+\.\d\d$/.test(a))).toBe(true); // 12.50
    expect(amounts.some((a) => /^\+00\d+\.\d\d$/.test(a))).toBe(true); // +0012.50
    expect(amounts.some((a) => /^\.\d$/.test(a))).toBe(true); // .5
    expect(amounts.some((a) => /^\d+\.$/.test(a))).toBe(true); // 7.
    expect(amounts.some((a) => /^-\d+$/.test(a))).toBe(true); // -3
    expect(amounts).toContain('0');
  });

  it('produces well-formed rewards with gifts, logos and extra fields in every variant', () => {
    const rewards = everyReward(first);
    const derived: Record<string, string> = {
      VALIDATED: 'VALIDATION',
      PAID_IN: 'POOLED',
      PAID_OUT: 'PAID',
    };
    for (const r of rewards) {
      expect(r.id).toMatch(uuid);
      expect(r.created_at).toMatch(rfc3339Z);
      expect(r.consumer_status).toBe(derived[r.status]);
      if (r.transaction) expect(r.transaction.executed_at).toMatch(rfc3339Z);
      expect(r.brand).toHaveProperty('name');
    }
    expect(new Set(rewards.map((r) => r.id)).size).toBe(rewards.length);
    const gifts = rewards.filter((r) => r.type === 'GIFT');
    expect(gifts.length).toBeGreaterThan(0);
    expect(gifts.every((r) => r.transaction === null)).toBe(true);
    expect(rewards.some((r) => r.type === 'CASHBACK' && r.transaction !== null)).toBe(true);
    expect(new Set(rewards.map((r) => r.status))).toEqual(
      new Set(['VALIDATED', 'PAID_IN', 'PAID_OUT']),
    );
    expect(rewards.some((r) => !('logo' in r.brand))).toBe(true);
    expect(rewards.some((r) => r.brand.logo === null)).toBe(true);
    expect(rewards.some((r) => r.brand.logo?.startsWith('https://'))).toBe(true);
    const known = new Set([
      'id',
      'amount',
      'created_at',
      'type',
      'status',
      'consumer_status',
      'transaction',
      'brand',
    ]);
    expect(rewards.some((r) => Object.keys(r).some((k) => !known.has(k)))).toBe(true);
  });
});
