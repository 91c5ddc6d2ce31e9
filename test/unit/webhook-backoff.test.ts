import type { MinimalJob } from 'bullmq';
import { describe, expect, it } from 'vitest';
import { deliveryBackoff } from '../../src/events/index.js';

const jobWith = (attemptsBefore?: number) =>
  ({
    data: { consumerId: 'c1', ...(attemptsBefore === undefined ? {} : { attemptsBefore }) },
  }) as unknown as MinimalJob;

/** The delay is its base within a fifth either way. */
function expectAbout(delay: number, base: number): void {
  expect(delay).toBeGreaterThanOrEqual(Math.floor(base * 0.8));
  expect(delay).toBeLessThanOrEqual(Math.ceil(base * 1.2));
}

describe('the webhook delivery backoff', () => {
  it('doubles from 1 s with each failed attempt, up to 5 min, whatever failed', () => {
    for (const [attempts, base] of [
      [1, 1000],
      [2, 2000],
      [4, 8000],
      [40, 300_000],
    ] as const) {
      expectAbout(deliveryBackoff(attempts, 'custom', undefined, jobWith()), base);
    }
  });

  it('starts again at 1 s once an event went, in a job that made many attempts before', () => {
    expectAbout(deliveryBackoff(41, 'custom', undefined, jobWith(40)), 1000);
    expectAbout(deliveryBackoff(43, 'custom', undefined, jobWith(40)), 4000);
  });
});
