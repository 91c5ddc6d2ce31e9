/**
 * The built `work` SIGKILLed mid-delivery: after a restart every reward event reaches the
 * receiver (at least once, each signed), and no consumer's events arrive out of order.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type ProcessRig,
  startProcessRig,
  startWorkerProcess,
  type WorkerProcess,
  waitFor,
} from '../support/processes.js';
import { startWebhookReceiver, type WebhookReceiver } from '../support/webhook-receiver.js';

let rig: ProcessRig;
let receiver: WebhookReceiver;
const workers: WorkerProcess[] = [];

beforeAll(async () => {
  receiver = await startWebhookReceiver();
  rig = await startProcessRig({ sandbox: { seed: 91, latencyMs: 5 } });
});

afterAll(async () => {
  for (const worker of workers) await worker.stop('SIGKILL');
  await rig?.close();
  await receiver?.close();
});

function start(): WorkerProcess {
  const worker = startWorkerProcess(
    rig.workerEnv({
      WEBHOOK_URL: receiver.url,
      WEBHOOK_SECRET: receiver.secret,
      WEBHOOK_CONCURRENCY: '4',
      JOB_LOCK_MS: '3000',
    }),
  );
  workers.push(worker);
  return worker;
}

describe('webhook delivery across a SIGKILL', () => {
  it('delivers every event after a restart, each consumer in order', async () => {
    const consumers = Array.from({ length: 30 }, (_, i) => `whk_${i}`);
    for (const id of consumers) {
      rig.sandbox.state.addConsumer(id, { rewards: 20 });
      await rig.producer.enqueueRewardSync({ consumerId: id });
    }
    const first = start();
    await waitFor(
      'deliveries under way',
      () => (receiver.accepted.length >= 100 ? true : undefined),
      60_000,
      20,
    ).catch((error: Error) => {
      throw new Error(`${error.message}\nworker output:\n${first.output().slice(-3000)}`);
    });
    await first.stop('SIGKILL');
    const atKill = receiver.accepted.length;
    expect(atKill).toBeLessThan(600);

    const second = start();
    await waitFor(
      'all 600 events delivered',
      () => (new Set(receiver.accepted.map((d) => d.id)).size >= 600 ? true : undefined),
      90_000,
      200,
    ).catch((error: Error) => {
      const got = new Set(receiver.accepted.map((d) => d.id)).size;
      throw new Error(
        `${error.message} (${got} delivered)\nworker output:\n${second.output().slice(-3000)}`,
      );
    });
    expect(receiver.accepted.every((d) => d.valid)).toBe(true);
    const ids = new Set(receiver.accepted.map((d) => d.id));
    expect(ids.size).toBe(600);
    // Per consumer, ids never go back, except a redelivery of the event in flight at the kill.
    const byConsumer = new Map<string, number[]>();
    for (const d of receiver.accepted) {
      const list = byConsumer.get(String(d.body.data.consumer_id)) ?? [];
      list.push(Number(d.id.slice(4)));
      byConsumer.set(String(d.body.data.consumer_id), list);
    }
    for (const [consumer, list] of byConsumer) {
      const distinct = list.filter((id, i) => list.indexOf(id) === i);
      expect(distinct, consumer).toEqual([...distinct].sort((a, b) => a - b));
      expect(distinct, consumer).toHaveLength(20);
    }
  }, 180_000);
});
