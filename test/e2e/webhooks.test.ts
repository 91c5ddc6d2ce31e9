/**
 * Reward events delivered as signed webhooks, end to end: the sandbox, the worker writing the
 * feed, and the delivery to a receiver that checks each signature by the Standard Webhooks
 * specification. Figures as the issue states them: 50 consumers × 20 rewards, 30 changes.
 */

import { Queue } from 'bullmq';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type DeliveryJobData,
  startWebhookDelivery,
  type Webhooks,
} from '../../src/events/index.js';
import { WebhookSender } from '../../src/events/webhook.js';
import { queueNames } from '../../src/queues/names.js';
import { enqueueRewardSync, startReconciliation } from '../../src/queues/producer.js';
import { listDeliveries, replayFrom } from '../../src/store/event-deliveries.js';
import { sleep, waitFor } from '../support/processes.js';
import {
  idsByConsumer,
  startWebhookReceiver,
  type WebhookReceiver,
} from '../support/webhook-receiver.js';
import { type Harness, startHarness } from '../support/worker-harness.js';

const logger = pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' });

let harness: Harness;
let receiver: WebhookReceiver;
let webhooks: Webhooks | undefined;

beforeAll(async () => {
  receiver = await startWebhookReceiver();
  harness = await startHarness({
    sandbox: { seed: 81 },
    env: {
      WEBHOOK_URL: receiver.url,
      WEBHOOK_SECRET: receiver.secret,
      WEBHOOK_TIMEOUT_MS: '2000',
    },
  });
  webhooks = harness.app.webhooks;
});

afterAll(async () => {
  await webhooks?.close();
  await harness?.close();
  await receiver?.close();
});

const senderOptions = () => ({
  url: receiver.url,
  secret: receiver.secret,
  timeoutMs: 1000,
  connections: 2,
});

/** The file's delivery stopped, and the webhooks queue, for a delivery of the test's own. */
async function ownWebhooksQueue(): Promise<Queue<DeliveryJobData>> {
  await webhooks?.close();
  webhooks = undefined;
  return new Queue<DeliveryJobData>(queueNames.webhooks, {
    connection: harness.runtime.connection,
    prefix: harness.prefix,
  });
}

/** A delivery of its own; by default it gives an event up after 1.5 s of refusals. */
function deliveryOf(
  queue: Queue<DeliveryJobData>,
  sender: WebhookSender,
  { maxAgeMs = 1500, lockMs = 30_000 } = {},
): Webhooks {
  return startWebhookDelivery({
    pool: harness.runtime.ctx.store.pool,
    schema: '"perks"',
    sender,
    maxAgeMs,
    logger,
    metrics: harness.runtime.metrics,
    connection: harness.runtime.connection,
    prefix: harness.prefix,
    queue,
    concurrency: 2,
    lockMs,
  });
}

async function syncAll(ids: readonly string[]): Promise<void> {
  for (const consumerId of ids) await enqueueRewardSync(harness.runtime.ctx.queues, { consumerId });
  await harness.idle(60_000);
}

async function delivered(count: number, timeoutMs = 60_000): Promise<void> {
  await waitFor(
    `${count} deliveries`,
    () => (receiver.accepted.length >= count ? true : undefined),
    timeoutMs,
    100,
  );
}

const consumers = Array.from({ length: 50 }, (_, i) => `wh_${String(i).padStart(2, '0')}`);

describe('reward events as signed webhooks', () => {
  it('delivers a first sync of 50 consumers × 20 rewards as 1,000 reward.created, each signed', async () => {
    for (const id of consumers) harness.sandbox.state.addConsumer(id, { rewards: 20 });
    await syncAll(consumers);
    await delivered(1000);
    await sleep(500);
    const all = receiver.accepted;
    expect(all).toHaveLength(1000);
    expect(all.every((d) => d.valid)).toBe(true);
    expect(new Set(all.map((d) => d.id)).size).toBe(1000);
    expect(new Set(all.map((d) => d.body.type))).toEqual(new Set(['reward.created']));
    // In feed order per consumer.
    for (const [consumer, ids] of idsByConsumer(all)) {
      expect(ids, consumer).toEqual([...ids].sort((a, b) => a - b));
    }
    const sample = all[0]?.body;
    expect(sample).toMatchObject({
      id: expect.stringMatching(/^evt_\d+$/),
      created_at: expect.any(String),
      data: {
        consumer_id: expect.stringMatching(/^wh_/),
        reward: {
          id: expect.any(String),
          amount: expect.stringMatching(/^-?\d+(\.\d+)?$/),
          type: expect.any(String),
          status: expect.any(String),
          consumer_status: expect.any(String),
          created_at: expect.any(String),
        },
      },
    });
    expect(sample?.id).toBe(all[0]?.id);
    expect(await harness.runtime.metrics.scrape()).toMatch(
      /perks_worker_webhook_deliveries_total\{outcome="delivered"\} 1000/,
    );
  }, 120_000);

  it('turns 30 status changes and a reconciliation into 30 reward.status_changed with the previous status', async () => {
    const before = receiver.accepted.length;
    const changed = new Map<string, string>();
    for (const id of consumers.slice(0, 30)) {
      const reward = (harness.sandbox.state.rewardsOf(id) as { id: string; status: string }[]).find(
        (r) => r.status === 'VALIDATED',
      );
      if (!reward) continue;
      harness.sandbox.state.setRewardStatus(id, reward.id, 'PAID_IN');
      changed.set(reward.id, reward.status);
      if (changed.size === 30) break;
    }
    expect(changed.size).toBe(30);
    await startReconciliation(harness.runtime.ctx.queues);
    await harness.idle(60_000);
    await delivered(before + 30);
    await sleep(1000);
    const fresh = receiver.accepted.slice(before);
    expect(fresh).toHaveLength(30);
    for (const d of fresh) {
      expect(d.valid).toBe(true);
      expect(d.body.type).toBe('reward.status_changed');
      const reward = d.body.data.reward as { id: string; status: string };
      expect(d.body.data.previous_status).toBe(changed.get(reward.id));
      expect(reward.status).toBe('PAID_IN');
    }
  }, 120_000);

  it('sends nothing for a re-sync of unchanged data', async () => {
    const before = receiver.accepted.length;
    await syncAll(consumers);
    await sleep(1500);
    expect(receiver.accepted.length).toBe(before);
  }, 60_000);

  it('loses nothing while the receiver answers 500, and keeps each consumer in order', async () => {
    const before = receiver.accepted.length;
    const more = Array.from({ length: 10 }, (_, i) => `wh_down_${i}`);
    for (const id of more) harness.sandbox.state.addConsumer(id, { rewards: 5 });
    receiver.refuseWith = 500;
    await syncAll(more);
    await sleep(5000);
    expect(receiver.accepted.length).toBe(before);
    expect(receiver.refused).toBeGreaterThanOrEqual(10);
    // Retried for days if need be: each job keeps only its last attempts' stack traces.
    const queue = new Queue<DeliveryJobData>(queueNames.webhooks, {
      connection: harness.runtime.connection,
      prefix: harness.prefix,
    });
    const retrying = await queue.getDelayed();
    await queue.close();
    expect(retrying.length).toBeGreaterThan(0);
    for (const job of retrying) expect(job.opts.stackTraceLimit).toBe(3);
    receiver.refuseWith = undefined;
    await delivered(before + 50);
    const fresh = receiver.accepted.slice(before);
    expect(new Set(fresh.map((d) => d.id)).size).toBe(50);
    for (const [consumer, ids] of idsByConsumer(fresh)) {
      expect(ids, consumer).toEqual([...ids].sort((a, b) => a - b));
    }
    // Waiting jobs were retried with backoff, not given up.
    const failedJobs = await harness.runtime.ctx.store.pool.query(
      'select count(*)::int as n from perks.reward_event_failures',
    );
    expect(failedJobs.rows[0]?.n).toBe(0);
  }, 90_000);

  it('goes on with other consumers while the endpoint answers one of them slowly', async () => {
    const before = receiver.accepted.length;
    const slow = 'wh_slow';
    const others = Array.from({ length: 5 }, (_, i) => `wh_fast_${i}`);
    for (const id of [slow, ...others]) harness.sandbox.state.addConsumer(id, { rewards: 3 });
    receiver.slow = { consumerId: slow, ms: 1500 };
    try {
      await syncAll([slow, ...others]);
      await delivered(before + 15, 20_000);
      const fresh = receiver.accepted.slice(before, before + 15);
      // The 15 events of the fast consumers all arrived before the slow one's three did.
      expect(fresh.every((d) => d.body.data.consumer_id !== slow)).toBe(true);
      await delivered(before + 18, 20_000);
    } finally {
      receiver.slow = undefined;
    }
  }, 60_000);

  it('lists deliveries, and replays from an event id in order', async () => {
    const schema = '"perks"';
    const pool = harness.runtime.ctx.store.pool;
    const latest = await listDeliveries(pool, schema, { failed: false, limit: 5 });
    expect(latest).toHaveLength(5);
    expect(latest.every((row) => row.state === 'delivered')).toBe(true);
    const from = latest[4]?.id ?? '0';
    const consumersAgain = await replayFrom(pool, schema, from);
    expect(consumersAgain).toBeGreaterThanOrEqual(1);
    const before = receiver.accepted.length;
    await delivered(before + 5);
    const again = receiver.accepted.slice(before).map((d) => Number(d.id.slice(4)));
    expect(again.every((id) => id >= Number(from))).toBe(true);
  }, 60_000);

  it.each([
    ['gives an event up once refused for longer than the max age, and lists it as failed', false],
    ['retries replayed events older than the max age for the whole age, losing none', true],
  ])(
    '%s',
    async (_, replay) => {
      const queue = await ownWebhooksQueue();
      const delivery = deliveryOf(queue, new WebhookSender(senderOptions()));
      try {
        const pool = harness.runtime.ctx.store.pool;
        if (replay) {
          // wh_gone's two events, given up by the case before, are older than the max age now.
          const failed = await listDeliveries(pool, '"perks"', { failed: true, limit: 10 });
          const gone = failed.map((row) => row.id).sort((a, b) => Number(a) - Number(b));
          const before = receiver.accepted.length;
          receiver.refuseWith = 503;
          expect(await replayFrom(pool, '"perks"', gone[0] ?? '0')).toBe(1);
          await sleep(1000); // refused, for less than the max age
          receiver.refuseWith = undefined;
          await delivered(before + 2);
          const again = receiver.accepted.slice(before).map((d) => d.id);
          expect(again).toEqual(gone.map((id) => `evt_${id}`));
          expect(await listDeliveries(pool, '"perks"', { failed: true, limit: 10 })).toEqual([]);
          return;
        }
        receiver.refuseWith = 503;
        harness.sandbox.state.addConsumer('wh_gone', { rewards: 2 });
        await syncAll(['wh_gone']);
        const failed = await waitFor(
          'two events given up',
          async () => {
            const rows = await listDeliveries(pool, '"perks"', { failed: true, limit: 10 });
            return rows.length === 2 ? rows : undefined;
          },
          30_000,
          200,
        );
        expect(failed.map((r) => r.consumer_id)).toEqual(['wh_gone', 'wh_gone']);
        expect(failed[0]?.last_error).toMatch(/answered 503/);
        expect(await harness.runtime.metrics.scrape()).toMatch(
          /perks_worker_webhook_deliveries_total\{outcome="failed"\} 2/,
        );
      } finally {
        receiver.refuseWith = undefined;
        await delivery.close();
        await queue.close();
      }
    },
    60_000,
  );

  it('gives the event after a given-up one the whole max age again', async () => {
    const queue = await ownWebhooksQueue();
    harness.sandbox.state.addConsumer('wh_streak', { rewards: 2 });
    await syncAll(['wh_streak']);
    const pool = harness.runtime.ctx.store.pool;
    const ids = (
      await pool.query<{ id: string }>(
        `select id from perks.reward_events where consumer_id = 'wh_streak' order by id`,
      )
    ).rows.map((row) => row.id);
    // The first event is refused for good; the second once, after the first was given up.
    const tries = new Map<string, number>();
    const sender = new (class extends WebhookSender {
      override async send(event: Parameters<WebhookSender['send']>[0], signal?: AbortSignal) {
        const n = (tries.get(event.id) ?? 0) + 1;
        tries.set(event.id, n);
        if (event.id === ids[0] || n === 1) throw new Error(`refused try ${n}`);
        return super.send(event, signal);
      }
    })(senderOptions());
    const delivery = deliveryOf(queue, sender);
    try {
      await waitFor(
        'the second event delivered, or given up',
        async () => {
          const failed = await listDeliveries(pool, '"perks"', { failed: true, limit: 10 });
          const streak = failed.filter((row) => row.consumer_id === 'wh_streak');
          const sent = receiver.accepted.some((d) => d.id === `evt_${ids[1]}`);
          return sent || streak.length === 2 ? true : undefined;
        },
        30_000,
        200,
      );
      const failed = await listDeliveries(pool, '"perks"', { failed: true, limit: 10 });
      expect(failed.filter((row) => row.consumer_id === 'wh_streak').map((row) => row.id)).toEqual([
        ids[0],
      ]);
      expect(receiver.accepted.map((d) => d.id)).toContain(`evt_${ids[1]}`);
    } finally {
      await delivery.close();
      await queue.close();
    }
  }, 60_000);

  it("counts a given-up event's own tries, and gives one a replay puts first its own max age", async () => {
    const queue = await ownWebhooksQueue();
    harness.sandbox.state.addConsumer('wh_own_tries', { rewards: 3 });
    await syncAll(['wh_own_tries']);
    const pool = harness.runtime.ctx.store.pool;
    const ids = (
      await pool.query<{ id: string }>(
        `select id from perks.reward_events where consumer_id = 'wh_own_tries' order by id`,
      )
    ).rows.map((row) => row.id);
    // The first event is refused twice, then delivered; the second refused until given up,
    // and replayed once its refusals are underway; the third always refused.
    const tries = new Map<string, number>();
    let replayed = false;
    const sender = new (class extends WebhookSender {
      override async send(event: Parameters<WebhookSender['send']>[0], signal?: AbortSignal) {
        const n = (tries.get(event.id) ?? 0) + 1;
        tries.set(event.id, n);
        if (event.id === ids[0] && (n <= 2 || replayed)) throw new Error(`refused try ${n}`);
        if (event.id !== ids[0]) throw new Error(`refused try ${n}`);
        return super.send(event, signal);
      }
    })(senderOptions());
    const failedOf = async () =>
      (await listDeliveries(pool, '"perks"', { failed: true, limit: 10 })).filter(
        (row) => row.consumer_id === 'wh_own_tries',
      );
    const delivery = deliveryOf(queue, sender, { maxAgeMs: 2500 });
    try {
      await waitFor(
        'the second event given up',
        async () => ((await failedOf()).some((row) => row.id === ids[1]) ? true : undefined),
        30_000,
        100,
      );
      const [secondGivenUp] = (await failedOf()).filter((row) => row.id === ids[1]);
      expect(secondGivenUp?.attempts).toBe(tries.get(ids[1] ?? ''));
      // The third refused a second time, a second into its refusals: a replay from the first
      // puts it before the third, for a try when the third's streak is 3 s old.
      await waitFor('the third refused twice', () =>
        (tries.get(ids[2] ?? '') ?? 0) >= 2 ? true : undefined,
      );
      const triesBefore = tries.get(ids[0] ?? '') ?? 0;
      replayed = true;
      await replayFrom(pool, '"perks"', ids[0] ?? '');
      await waitFor(
        'the first given up again',
        async () => ((await failedOf()).some((row) => row.id === ids[0]) ? true : undefined),
        30_000,
        100,
      );
      // Its own refusals span the max age (1 s, then 2 s of backoff), not the third's rest,
      // and its failure row counts them alone.
      const ownTries = (tries.get(ids[0] ?? '') ?? 0) - triesBefore;
      expect(ownTries).toBeGreaterThanOrEqual(2);
      const [firstGivenUp] = (await failedOf()).filter((row) => row.id === ids[0]);
      expect(firstGivenUp?.attempts).toBe(ownTries);
    } finally {
      await delivery.close();
      await queue.close();
    }
  }, 60_000);

  it('a delivery whose lock was lost stops, and gives up no event for it', async () => {
    const queue = await ownWebhooksQueue();
    harness.sandbox.state.addConsumer('wh_lock', { rewards: 1 });
    await syncAll(['wh_lock']);
    const pool = harness.runtime.ctx.store.pool;
    let [tries, cancelled] = [0, false];
    // wh_lock's event is refused once, then held until its job is cancelled; the others go.
    const sender = new (class extends WebhookSender {
      override async send(event: Parameters<WebhookSender['send']>[0], signal?: AbortSignal) {
        if (event.consumer_id !== 'wh_lock') return super.send(event, signal);
        tries += 1;
        if (tries === 1) throw new Error('refused once');
        await new Promise((_, reject) =>
          signal?.addEventListener('abort', () => {
            cancelled = true;
            // As the sender's own request fails when its signal aborts.
            reject(new Error('no answer from the webhook receiver (AbortError)'));
          }),
        );
      }
    })(senderOptions());
    const delivery = deliveryOf(queue, sender, { lockMs: 1000 });
    try {
      await waitFor('the second try held', () => (tries === 2 ? true : undefined), 10_000);
      // Refused since more than the max age (1.5 s): one more refusal would give it up.
      await sleep(1600);
      const job = await waitFor('the delivery of wh_lock active', async () =>
        (await queue.getActive()).find((j) => j.data.consumerId === 'wh_lock'),
      );
      // Another replica's now, as after Redis was away longer than the lock.
      await harness.runtime.connection.del(
        `${harness.prefix}:${queueNames.webhooks}:${job.id}:lock`,
      );
      await waitFor('the job cancelled', () => (cancelled ? true : undefined), 10_000);
      await sleep(300);
      const failed = await listDeliveries(pool, '"perks"', { failed: true, limit: 50 });
      expect(failed.filter((row) => row.consumer_id === 'wh_lock')).toEqual([]);
    } finally {
      await delivery.close();
      await queue.close();
    }
  }, 60_000);
});
