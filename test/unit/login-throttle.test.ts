import { describe, expect, it } from 'vitest';
import { LoginThrottle } from '../../src/ops/login-throttle.js';

describe('LoginThrottle', () => {
  it('doubles the wait after each failure from an address, up to 10 s', () => {
    const throttle = new LoginThrottle(() => 0);
    const waits = Array.from({ length: 8 }, () => throttle.failed('10.0.0.1'));
    expect(waits).toEqual([250, 500, 1000, 2000, 4000, 8000, 10_000, 10_000]);
    // Another address is not slowed by the first one's failures.
    expect(throttle.failed('10.0.0.2')).toBe(250);
  });

  it('forgets an address after a success, or 15 minutes without a failure', () => {
    let now = 0;
    const throttle = new LoginThrottle(() => now);
    throttle.failed('a');
    throttle.failed('a');
    throttle.succeeded('a');
    expect(throttle.failed('a')).toBe(250);
    throttle.failed('a');
    now += 15 * 60_000;
    expect(throttle.failed('a')).toBe(250);
  });
});
