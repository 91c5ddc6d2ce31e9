import { afterEach, describe, expect, it, vi } from 'vitest';
import { oncePerOutage } from '../../src/ops/outage.js';

afterEach(() => vi.useRealTimers());

describe('oncePerOutage', () => {
  it('logs the first error, stays quiet, and logs again after recovery or after the quiet window', () => {
    vi.useFakeTimers();
    const logged: string[] = [];
    const outage = oncePerOutage((e) => logged.push(e.message), 60_000);
    outage.error(new Error('a'));
    outage.error(new Error('b'));
    expect(logged).toEqual(['a']);
    outage.recovered();
    outage.error(new Error('c'));
    expect(logged).toEqual(['a', 'c']);
    vi.advanceTimersByTime(59_000);
    outage.error(new Error('d'));
    vi.advanceTimersByTime(2_000);
    outage.error(new Error('e'));
    expect(logged).toEqual(['a', 'c', 'e']);
  });
});
