/** The adaptive limit of requests in flight, driven by simulated round trips and clock. */
import { describe, expect, it } from 'vitest';
import { ConcurrencyLimit } from '../../../src/perks/concurrency.js';

/** A limiter on a simulated clock, and round trips of a closed loop through it. */
function simulated(options: { max: number; initial: number }) {
  let now = 0;
  const limiter = new ConcurrencyLimit({ ...options, now: () => now });
  /**
   * As many requests as the limit lets out, answered in `rttOf(inFlight)` ms with
   * `outcomeOf(inFlight)`; the limit after each round.
   */
  async function rounds(
    count: number,
    rttOf: (inFlight: number) => number,
    outcomeOf: (inFlight: number) => 'ok' | 'overload' = () => 'ok',
  ): Promise<number[]> {
    const limits: number[] = [];
    for (let round = 0; round < count; round++) {
      const slots = [];
      for (let i = 0; i < limiter.limit; i++) slots.push(await limiter.acquire());
      const inFlight = limiter.inFlight.now;
      now += rttOf(inFlight);
      for (const done of slots) done(outcomeOf(inFlight), rttOf(inFlight));
      limits.push(limiter.limit);
    }
    return limits;
  }
  return { limiter, rounds };
}

/** An API that serves `parallel` requests at once in `ms`; more wait their turn. */
const api = (parallel: number, ms: number) => (inFlight: number) =>
  ms * Math.max(1, inFlight / parallel);

describe('ConcurrencyLimit', () => {
  it('grows to its maximum while answers keep their speed, and never passes it', async () => {
    const { limiter, rounds } = simulated({ max: 128, initial: 4 });
    const limits = await rounds(60, () => 20);
    // About doubling each round trip at first: 4 to 128 in a few.
    expect(limits.indexOf(128)).toBeGreaterThan(3);
    expect(limits.indexOf(128)).toBeLessThan(8);
    expect(Math.max(...limits)).toBe(128);
    expect(limiter.inFlight.peak).toBe(128);
  });

  it('settles where answers start to slow, and stays there', async () => {
    const { rounds } = simulated({ max: 128, initial: 4 });
    // 3,000 round trips of 20 ms or more: a minute, six probes of the no-load round trip.
    const limits = await rounds(3000, api(24, 20));
    // Round trips 1.2 to 2 × the no-load one: 29 to 48 requests out for the 24 served.
    const settled = limits.slice(100).filter((limit) => limit > 20);
    expect(Math.min(...settled)).toBeGreaterThanOrEqual(28);
    expect(Math.max(...settled)).toBeLessThanOrEqual(49);
  });

  it('finds the same limit again after the API slows for good', async () => {
    const { rounds } = simulated({ max: 128, initial: 4 });
    await rounds(500, api(24, 20));
    // Twice as slow, as parallel: not a queue. Within a probe or two the limit is back.
    const limits = await rounds(2000, api(24, 40));
    const settled = limits.slice(1000).filter((limit) => limit > 20);
    expect(Math.min(...settled)).toBeGreaterThanOrEqual(28);
    expect(Math.max(...settled)).toBeLessThanOrEqual(49);
  });

  it('cuts by a tenth on 429 or 5xx, once per round trip, and stays near an unknown cap', async () => {
    const { rounds } = simulated({ max: 128, initial: 40 });
    const [first] = await rounds(
      1,
      () => 20,
      () => 'overload',
    );
    // Forty overloads of one round trip: one cut, not forty.
    expect(first).toBe(36);
    // Refused past 24 in flight (a limit it was not told), answered at once otherwise.
    const limits = await rounds(
      1000,
      () => 20,
      (n) => (n > 24 ? 'overload' : 'ok'),
    );
    const settled = limits.slice(100).filter((limit) => limit > 15);
    expect(Math.max(...settled)).toBeLessThanOrEqual(25);
    expect(Math.min(...settled)).toBeGreaterThanOrEqual(20);
  });

  it('lets waiting requests through in order, and drops one whose caller gave up', async () => {
    const limiter = new ConcurrencyLimit({ max: 1 });
    const done = await limiter.acquire();
    const order: string[] = [];
    const cancel = new AbortController();
    const a = limiter.acquire().then((release) => {
      order.push('a');
      return release;
    });
    const gaveUp = limiter.acquire(cancel.signal).catch((error: unknown) => error);
    const c = limiter.acquire().then((release) => {
      order.push('c');
      return release;
    });
    cancel.abort(new Error('cancelled'));
    expect(await gaveUp).toEqual(new Error('cancelled'));
    done('ok', 20);
    (await a)('ok', 20);
    (await c)('ignore', 0);
    expect(order).toEqual(['a', 'c']);
    expect(limiter.inFlight).toEqual({ now: 0, peak: 1 });
  });
});
