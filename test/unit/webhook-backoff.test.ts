import type { MinimalJob } from 'bullmq';
import { describe, expect, it } from 'vitest';
import { deliveryBackoff } from '../../src/events/index.js';

const refusedFor = (ms: number | undefined) =>
  ({
    data: {
      consumerId: 'c1',
      ...(ms === undefined ? {} : { refusedSince: new Date(Date.now() - ms).toISOString() }),
    },
  }) as unknown as MinimalJob;

describe('the webhook delivery backoff', () => {
  it('waits as long as the refusals have lasted: 1 s to 5 min, within a fifth', () => {
    for (const [lasted, base] of [
      [undefined, 1000],
      [0, 1000],
      [8000, 8000],
      [3_600_000, 300_000],
    ] as const) {
      const delay = deliveryBackoff(1, 'custom', undefined, refusedFor(lasted));
      expect(delay).toBeGreaterThanOrEqual(base * 0.8 - 20);
      expect(delay).toBeLessThanOrEqual(base * 1.2 + 20);
    }
  });

  it('starts again at 1 s in a job that has made many attempts, once a delivery ended the refusals', () => {
    const delay = deliveryBackoff(40, 'custom', undefined, refusedFor(undefined));
    expect(delay).toBeLessThanOrEqual(1200);
  });
});
