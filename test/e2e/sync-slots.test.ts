/**
 * A replica runs SYNC_CONCURRENCY × SYNC_CONSUMERS_PER_JOB consumer syncs at once (here 2 × 3):
 * as many whether each consumer has a sync job of its own or a reconciliation's job holds
 * several, and never more. Every API answer is 100 ms late, so the syncs overlap; the sandbox
 * counts its requests in flight.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { enqueueRewardSyncs } from '../../src/queues/producer.js';
import { expectConsistent } from '../support/processes.js';
import { type Harness, startHarness } from '../support/worker-harness.js';

let harness: Harness | undefined;
afterEach(async () => {
  await harness?.close();
  harness = undefined;
});

const slots = 6;

async function syncedAtOnce(consumersPerJob: number): Promise<number> {
  harness = await startHarness({
    env: { SYNC_CONCURRENCY: '2', SYNC_CONSUMERS_PER_JOB: '3', PERKS_CONNECTIONS: '64' },
  });
  const h = harness;
  const ids = Array.from({ length: 24 }, (_, i) => `slot_${String(i).padStart(2, '0')}`);
  for (const id of ids) h.sandbox.state.addConsumer(id, { rewards: 2 });
  h.sandbox.state.setLatency(100);
  h.sandbox.state.restartPeakInFlight();
  await enqueueRewardSyncs(h.runtime.ctx.queues, ids, 'manual', { consumersPerJob });
  await h.idle(30_000);
  await expectConsistent(h.runtime.ctx.store.pool, h.sandbox, ids);
  return h.sandbox.state.counters().peakInFlight;
}

describe('consumer syncs at once in a replica', () => {
  it('jobs of one consumer each fill every sync slot, not just SYNC_CONCURRENCY of them', async () => {
    const peak = await syncedAtOnce(1);
    expect(peak).toBeGreaterThan(2);
    expect(peak).toBeLessThanOrEqual(slots);
  }, 40_000);

  it('jobs of several consumers, as many jobs taken as slots, still sync no more at once than the slots', async () => {
    const peak = await syncedAtOnce(3);
    expect(peak).toBeLessThanOrEqual(slots);
  }, 40_000);
});
