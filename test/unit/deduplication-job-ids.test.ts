import type { Queue } from 'bullmq';
import { describe, expect, it } from 'vitest';
import { deduplicationJobIds } from '../../src/jobs/sync-rewards-batch.js';

/** A queue whose backend client is `client`, answering getDeduplicationJobId from `keys`. */
function queueWith(client: object, keys: Record<string, string>) {
  const calls: string[] = [];
  const queue = {
    keys: { de: 'p:reward-sync:de' },
    getBackend: () => ({ client: Promise.resolve(client) }),
    getDeduplicationJobId: async (id: string) => {
      calls.push(id);
      return keys[`p:reward-sync:de:${id}`] ?? null;
    },
  } as unknown as Queue;
  return { queue, calls };
}

describe('deduplicationJobIds', () => {
  const keys = { 'p:reward-sync:de:b': 'job-b' };

  it('reads every key in one MGET when the client has it', async () => {
    const mgets: string[][] = [];
    const client = {
      mget: async (k: string[]) => {
        mgets.push(k);
        return k.map((key) => keys[key as keyof typeof keys] ?? null);
      },
    };
    const { queue, calls } = queueWith(client, keys);
    expect(await deduplicationJobIds(queue, ['a', 'b', 'c'])).toEqual([null, 'job-b', null]);
    expect(mgets).toEqual([['p:reward-sync:de:a', 'p:reward-sync:de:b', 'p:reward-sync:de:c']]);
    expect(calls).toEqual([]);
    expect(await deduplicationJobIds(queue, [])).toEqual([]);
    expect(mgets).toHaveLength(1);
  });

  it("falls back to BullMQ's own read, one id at a time, on a client without MGET", async () => {
    const { queue, calls } = queueWith({}, keys);
    expect(await deduplicationJobIds(queue, ['a', 'b'])).toEqual([null, 'job-b']);
    expect(calls).toEqual(['a', 'b']);
  });
});
