/**
 * The reward events feed through the worker: enrollment, sync and re-sync against the sandbox
 * record the events of EVENT_TYPES, with the user id (the store's own tests:
 * test/integration/store/reward-events.test.ts).
 */
import { describe, expect, it } from 'vitest';
import { deriveConsumerId } from '../../src/queues/consumer-id.js';
import { enqueueEnrollment, enqueueRewardSync } from '../../src/queues/producer.js';
import { startHarness, testConsumerIdKey } from '../support/worker-harness.js';

describe('reward events through the worker', () => {
  it('records the EVENT_TYPES asked for of an enrolled user, from enrollment to re-sync', async () => {
    const h = await startHarness({
      env: { EVENT_TYPES: 'reward.status_changed,reward.missing' },
    });
    try {
      const userId = 'events-user@example.com';
      const consumerId = deriveConsumerId(userId, testConsumerIdKey);
      h.sandbox.state.addConsumer(consumerId, { enrolled: false, rewards: 5 });
      await enqueueEnrollment(h.runtime.ctx.queues, { userId }, testConsumerIdKey);
      await h.idle();
      const pool = h.runtime.ctx.store.pool;
      const feed = async () =>
        (
          await pool.query<{ type: string; reward_id: string; user_id: string }>(
            'select type, reward_id, user_id from perks.reward_events order by id',
          )
        ).rows;
      // Five rewards stored, none recorded as created: reward.created is not asked for.
      expect(await h.rewardIds(consumerId)).toHaveLength(5);
      expect(await feed()).toEqual([]);

      const items = h.sandbox.state.rewardsOf(consumerId) as { id: string; status: string }[];
      const moved = items.find((r) => r.status !== 'PAID_OUT') as { id: string };
      const gone = items.find((r) => r !== moved) as { id: string };
      h.sandbox.state.setRewardStatus(consumerId, moved.id, 'PAID_OUT');
      h.sandbox.state.removeReward(consumerId, gone.id);
      await enqueueRewardSync(h.runtime.ctx.queues, { consumerId });
      await h.idle();
      await enqueueRewardSync(h.runtime.ctx.queues, { consumerId });
      await h.idle();
      const expected = [
        { type: 'reward.status_changed', reward_id: moved.id, user_id: userId },
        { type: 'reward.missing', reward_id: gone.id, user_id: userId },
      ];
      expect(await feed()).toEqual(expected.sort((a, b) => (a.reward_id < b.reward_id ? -1 : 1)));
    } finally {
      await h.close();
    }
  });
});
