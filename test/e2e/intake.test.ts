/**
 * The three intake paths of the built `perks-worker work`, driven only through their public
 * names (INTAKE_*, OUTBOX_*, perks.enqueue_enrollment, the AMQP queue), as a client's systems
 * would: signups arrive over HTTP, from committed outbox rows and from RabbitMQ, with
 * duplicates, a rolled-back transaction and an invalid message, while the worker is SIGKILLed
 * and restarted. Every consumer ends up enrolled exactly once upstream; nothing is lost.
 */
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:net';
import pg from 'pg';
import { Connection } from 'rabbitmq-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type ProcessRig,
  sleep,
  startProcessRig,
  startWorkerProcess,
  type WorkerProcess,
  waitFor,
} from '../support/processes.js';

const amqpUrl = process.env.TEST_AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
const token = randomBytes(24).toString('hex');
const amqpQueue = `perks.signups.e2e-${randomBytes(4).toString('hex')}`;

let rig: ProcessRig;
let rabbit: Connection;
let env: Record<string, string>;
const workers: WorkerProcess[] = [];

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  await new Promise((resolve) => server.close(resolve));
  return typeof address === 'object' && address ? address.port : 0;
}

beforeAll(async () => {
  rig = await startProcessRig({ sandbox: { seed: 71, rewardsOnEnroll: 1 } });
  rabbit = new Connection(amqpUrl);
  env = rig.workerEnv({
    INTAKE_TOKEN: token,
    INTAKE_PORT: String(await freePort()),
    INTAKE_HOST: '127.0.0.1',
    OUTBOX_POLL_MS: '200',
    INTAKE_AMQP_URL: amqpUrl,
    INTAKE_AMQP_QUEUE: amqpQueue,
    PERKS_CONSUMER_ID_KEY: 'e2e-intake-consumer-id-key-012345',
    JOB_LOCK_MS: '3000',
  });
});

afterAll(async () => {
  for (const worker of workers) await worker.stop('SIGKILL');
  const channel = await rabbit?.acquire();
  for (const queue of [amqpQueue, `${amqpQueue}.dead`]) {
    await channel?.queueDelete({ queue }).catch(() => {});
  }
  await channel?.close();
  await rabbit?.close();
  await rig?.close();
});

function start(): WorkerProcess {
  const worker = startWorkerProcess(env);
  workers.push(worker);
  return worker;
}

/** Resolves with the ops port once the worker logged 'worker started'. */
async function started(worker: WorkerProcess): Promise<number> {
  return waitFor('worker started', () => {
    const line = worker
      .output()
      .split('\n')
      .find((l) => l.includes('"worker started"'));
    return line ? (JSON.parse(line) as { port: number }).port : undefined;
  });
}

/** Posts until a 202, as a client whose calls may meet a restarting worker would. */
async function postEnrollments(users: readonly string[]): Promise<void> {
  for (;;) {
    const response = await fetch(`http://127.0.0.1:${env.INTAKE_PORT}/v1/enrollments`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify(users.map((user_id) => ({ user_id }))),
    }).catch(() => undefined); // refused: the worker is restarting
    if (response?.status === 202) return;
    if (response && response.status !== 503) {
      throw new Error(`intake answered ${response.status}: ${await response.text()}`);
    }
    await sleep(200);
  }
}

describe('signups through HTTP, the outbox and RabbitMQ, across a SIGKILL', () => {
  it('enrolls every consumer exactly once upstream, and loses nothing', async () => {
    const http = Array.from({ length: 300 }, (_, i) => `e2e-http-${i}`);
    const outbox = Array.from({ length: 300 }, (_, i) => `e2e outbox ${i}`); // derived ids
    const amqp = Array.from({ length: 300 }, (_, i) => `e2e-amqp-${i}`);
    const unique = http.length + outbox.length + amqp.length;

    const first = start();
    const opsPort = await started(first);
    const ready = await fetch(`http://127.0.0.1:${opsPort}/readyz`);
    expect(await ready.json()).toMatchObject({ status: 'ready', checks: { rabbitmq: 'ok' } });
    const db = new pg.Client(rig.db.url);
    await db.connect();
    const signups = new pg.Pool({ connectionString: rig.db.url, max: 4 });
    const publisher = rabbit.createPublisher({ confirm: true });
    try {
      // A signup transaction that rolls back leaves nothing behind.
      await db.query('begin');
      await db.query('select perks.enqueue_enrollment($1)', ['e2e-rolled-back']);
      await db.query('rollback');

      const feed = async (from: number, to: number) => {
        const sends: Promise<unknown>[] = [];
        for (let i = from; i < to; i += 50) {
          // Each batch again with its first 10: duplicates within and across paths' retries.
          const batch = (list: string[]) => [...list.slice(i, i + 50), ...list.slice(i, i + 10)];
          sends.push(postEnrollments(batch(http)));
          sends.push(
            (async () => {
              // One signup transaction per batch, as many services at once.
              const client = await signups.connect();
              try {
                await client.query('begin');
                for (const user of batch(outbox)) {
                  await client.query("select perks.enqueue_enrollment($1, array['TARGETING'])", [
                    user,
                  ]);
                }
                await client.query('commit');
              } finally {
                client.release();
              }
            })(),
          );
          for (const user_id of batch(amqp)) {
            sends.push(
              publisher.send({ routingKey: amqpQueue, durable: true }, JSON.stringify({ user_id })),
            );
          }
        }
        await Promise.all(sends);
      };

      await feed(0, 150);
      await sleep(300);
      // Killed with signups in every stage: posted, committed, published, enqueued, running.
      await first.stop('SIGKILL');
      // Signups keep coming while no worker runs: rows and messages wait, posts are retried.
      const feeding = feed(150, 300);
      await sleep(1000);
      const second = start();
      await started(second);
      await feeding;
      await publisher.send({ routingKey: amqpQueue, durable: true }, '{"user_id": 42}');

      // Upstream can count every consumer before the datastore does: a job killed between its
      // POST and its write is retried (a 409) once its lock expires.
      const enrolledHere = async () =>
        (
          await db.query<{ n: number }>(
            'select count(*)::int as n from perks.consumers where enrolled_at is not null',
          )
        ).rows[0]?.n ?? 0;
      await waitFor(
        'every consumer enrolled, upstream and in the datastore',
        async () =>
          rig.sandbox.state.counters().enrollmentsCreated >= unique &&
          (await enrolledHere()) >= unique
            ? true
            : undefined,
        120_000,
        500,
      );
      await sleep(2000); // a late duplicate would show here
      expect(rig.sandbox.state.counters().enrollmentsCreated).toBe(unique);

      const { rows } = await db.query<{ pending: number; failed: number; rows: number }>(
        `select count(*) filter (where processed_at is null)::int as pending,
                count(*) filter (where error is not null)::int as failed,
                count(*)::int as rows
           from perks.signup_outbox`,
      );
      expect(rows[0]).toEqual({ pending: 0, failed: 0, rows: 360 });
      expect(await enrolledHere()).toBe(unique);
      expect(rig.sandbox.state.isEnrolled('e2e-rolled-back')).toBe(false);

      const channel = await rabbit.acquire();
      try {
        const left = await channel.queueDeclare({ queue: amqpQueue, passive: true });
        expect(left.messageCount).toBe(0);
        const dead = await channel.basicGet({ queue: `${amqpQueue}.dead`, noAck: true });
        expect(dead?.headers?.['x-perks-error']).toMatch(/user_id/);
      } finally {
        await channel.close();
      }
    } finally {
      await publisher.close();
      await signups.end();
      await db.end();
    }
  }, 180_000);
});
