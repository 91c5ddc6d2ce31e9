import { describe, expect, it } from 'vitest';
import { syncsInFlight } from '../../src/jobs/sync-rewards-batch.js';
import { defaultWriterLimits } from '../../src/store/reward-writer.js';

describe('defaultWriterLimits', () => {
  it('lets a statement of small pages hold half the writers, 100 pages at most', () => {
    expect(defaultWriterLimits(10, 64).maxPages).toBe(32);
    expect(defaultWriterLimits(10, 7).maxPages).toBe(4);
    expect(defaultWriterLimits(10, 1).maxPages).toBe(1);
    expect(defaultWriterLimits(10, 1000).maxPages).toBe(100);
    expect(defaultWriterLimits(10).maxPages).toBe(100);
  });

  it('keeps one lane per 8 connections', () => {
    expect(defaultWriterLimits(10, 64).lanes).toBe(1);
    expect(defaultWriterLimits(16, 64).lanes).toBe(2);
    expect(defaultWriterLimits(4).lanes).toBe(1);
  });
});

describe('syncsInFlight', () => {
  it('counts the consumers of every sync job running at once', () => {
    const worker = { syncConcurrency: 8, syncConsumersPerJob: 8, rateLimitPerSecond: undefined };
    expect(syncsInFlight(worker)).toBe(64);
    // Rate-limited: one consumer per job.
    expect(syncsInFlight({ ...worker, rateLimitPerSecond: 50 })).toBe(8);
  });
});
