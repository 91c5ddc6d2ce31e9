/**
 * The RabbitMQ intake against the machine's broker, Redis and Postgres, with the in-process
 * worker enrolling against the sandbox. Each test consumes a queue of its own; a TCP proxy
 * stands in for Redis or the broker going away, and `rabbitmqctl` closes the intake's
 * connection from the broker's side, as a broker shutting down does.
 */
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { Connection, type Publisher } from 'rabbitmq-client';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  type AmqpIntake,
  type AmqpIntakeOptions,
  deadQueueOf,
  errorHeader,
  startAmqpIntake,
} from '../../../src/intake/amqp.js';
import type { IntakeMetrics, IntakeOutcome } from '../../../src/ops/metrics.js';
import { deriveConsumerId } from '../../../src/queues/consumer-id.js';
import { closeQueues, openQueues, type Queues } from '../../../src/queues/queues.js';
import {
  connected,
  createRedisConnection,
  type RedisClient,
} from '../../../src/redis/connection.js';
import { sleep, waitFor } from '../../support/processes.js';
import {
  amqpUrl,
  closeBrokerConnections,
  ensureBroker,
  queueDepth,
  testAmqpQueue,
} from '../../support/rabbitmq.js';
import { startTcpProxy, type TcpProxy, targetOf } from '../../support/tcp-proxy.js';
import { type Harness, startHarness, testConsumerIdKey } from '../../support/worker-harness.js';

let h: Harness;
let redis: RedisClient;
let queues: Queues;
let broker: Connection;
let publisher: Publisher;
const declared: string[] = [];
const cleanups: (() => Promise<void>)[] = [];
let intake: AmqpIntake | undefined;

beforeAll(async () => {
  await ensureBroker();
  h = await startHarness({ env: { ENROLL_CONCURRENCY: '32', SYNC_CONCURRENCY: '32' } });
  redis = createRedisConnection(h.config.redis, 'producer');
  await connected(redis);
  queues = openQueues(redis, h.prefix, h.config.jobs);
  // RabbitMQ's frame_max, as pika or Bunny have it (rabbitmq-client's own default is 8192).
  broker = new Connection({
    url: amqpUrl,
    connectionName: 'amqp intake test publisher',
    frameMax: 131_072,
  });
  publisher = broker.createPublisher({ confirm: true });
});

afterEach(async () => {
  await intake?.close();
  intake = undefined;
  // A test that failed midway must not leave its enrollments to the next one's count.
  await h.idle().catch(() => {});
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

afterAll(async () => {
  for (const queue of declared) await broker.queueDelete({ queue });
  await publisher.close();
  await broker.close();
  await closeQueues(queues);
  redis.disconnect();
  await h.close();
});

function countingMetrics(): IntakeMetrics & { counts: Record<IntakeOutcome, number> } {
  const counts = { accepted: 0, duplicate: 0, rejected: 0 };
  return {
    counts,
    intake(source, outcome, count = 1) {
      expect(source).toBe('amqp');
      counts[outcome] += count;
    },
  };
}

/**
 * A fresh queue, declared as a publisher would (durable, no arguments: the same declaration
 * as the intake's), so messages published before the intake connects are kept. It and its
 * `.dead` are deleted after the file.
 */
async function newQueue(): Promise<string> {
  const queue = testAmqpQueue();
  declared.push(queue, deadQueueOf(queue));
  await broker.queueDeclare({ queue, durable: true });
  return queue;
}

async function start(queue: string, overrides: Partial<AmqpIntakeOptions> = {}) {
  const metrics = countingMetrics();
  intake = await startAmqpIntake({
    url: amqpUrl,
    queue,
    prefetch: 100,
    queues,
    consumerIdKey: testConsumerIdKey,
    logger: pino({ level: 'silent' }),
    metrics,
    ...overrides,
  });
  return { intake, counts: metrics.counts };
}

async function publish(queue: string, bodies: readonly unknown[]): Promise<void> {
  await Promise.all(
    bodies.map((body) => publisher.send({ routingKey: queue, durable: true }, body)),
  );
}

/** Ready messages left (a passive declare does not count those a consumer holds). */
async function readyCount(queue: string): Promise<number> {
  return (await broker.queueDeclare({ queue, passive: true })).messageCount;
}

/** Queues of their own whose enrollment adds first run `before`: to count them, or slow them. */
function queuesWith(connection: RedisClient, before: () => unknown): Queues {
  const own = openQueues(connection, h.prefix, h.config.jobs);
  cleanups.push(() => closeQueues(own));
  const addBulk = own.enrollment.addBulk.bind(own.enrollment);
  own.enrollment.addBulk = async (...args) => {
    await before();
    return addBulk(...args);
  };
  return own;
}

const created = () => h.sandbox.state.counters().enrollmentsCreated;

function signups(prefix: string, count: number): { user_id: string }[] {
  return Array.from({ length: count }, (_, i) => ({ user_id: `${prefix}-${i}@example.com` }));
}

describe('RabbitMQ intake', () => {
  it('1,000 messages, 100 of them a user id again: each consumer enrolled once upstream, the queue drained, nothing dead', async () => {
    const queue = await newQueue();
    const { counts } = await start(queue);
    const before = created();
    const unique = signups('bulk', 900).map((s, i) =>
      i % 3 === 0 ? { ...s, extra_consents: ['TARGETING'], removed_consents: [] } : s,
    );
    const bodies = [...unique, ...unique.slice(0, 100)];
    await publish(queue, bodies);

    await waitFor('1,000 messages handled', () =>
      counts.accepted + counts.duplicate === 1000 ? true : undefined,
    );
    await waitFor('900 enrollments upstream', () => (created() - before >= 900 ? true : undefined));
    await h.idle(30_000);
    await intake?.close(); // anything still unacked would be back in the queue now

    expect(created() - before).toBe(900);
    for (const { user_id } of unique)
      expect(h.sandbox.state.isEnrolled(deriveConsumerId(user_id, testConsumerIdKey))).toBe(true);
    expect(counts.accepted).toBeGreaterThanOrEqual(900);
    expect(counts.rejected).toBe(0);
    expect(await readyCount(queue)).toBe(0);
    expect(await readyCount(deadQueueOf(queue))).toBe(0);
  }, 40_000);

  it('requeues a signup that needs PERKS_CONSUMER_ID_KEY on a replica without it, for one that has it', async () => {
    const queue = await newQueue();
    const keyless = await start(queue, { consumerIdKey: undefined });
    await publish(queue, [{ user_id: 'someone@example.com' }, { user_id: 'amqp_keyless_ok' }]);
    await waitFor('the other one enqueued', () =>
      keyless.counts.accepted === 1 ? true : undefined,
    );
    await sleep(1000); // the one that needs the key is requeued, after a pause each time
    expect(keyless.counts).toEqual({ accepted: 1, duplicate: 0, rejected: 0 });
    await intake?.close();
    intake = undefined;
    expect(await readyCount(deadQueueOf(queue))).toBe(0);
    expect(await readyCount(queue)).toBe(1);
    const keyed = await start(queue);
    await waitFor('enqueued by a replica with the key', () =>
      keyed.counts.accepted === 1 ? true : undefined,
    );
    expect(await readyCount(queue)).toBe(0);
  });

  it('invalid messages go to <queue>.dead with x-perks-error naming the field; only the valid one is enqueued', async () => {
    const queue = await newQueue();
    const { counts } = await start(queue);
    const before = created();
    const rawNotJson = Buffer.from('{"user_id": "amqp_cut_off"');
    await publisher.send(
      {
        routingKey: queue,
        durable: true,
        messageId: 'msg-bad-consent',
        correlationId: 'corr-7',
        headers: { 'x-tenant': 'eu-1' },
      },
      { user_id: 'amqp_bad_consent', extra_consents: ['TARGETING', 'NOPE'] },
    );
    await publish(queue, [
      { user_id: 'amqp_extra_field', colour: 'red' },
      { user_id: 'amqp_both', extra_consents: ['BASIC'], removed_consents: ['BASIC'] },
      {},
      'not json at all',
      { user_id: 'amqp_valid_1' },
    ]);
    await publisher.send({ routingKey: queue, contentType: 'application/json' }, rawNotJson);
    // Latin-1, not UTF-8: the client decodes the é to U+FFFD.
    const latin1 = Buffer.concat([Buffer.from('{"user_id":"Jos'), Buffer.from([0xe9, 0x22, 0x7d])]);
    await publisher.send({ routingKey: queue, contentType: 'application/json' }, latin1);

    await waitFor('8 messages handled', () =>
      counts.accepted + counts.rejected === 8 ? true : undefined,
    );
    expect(counts).toEqual({ accepted: 1, duplicate: 0, rejected: 7 });

    const dead: { reason: string; body: unknown; headers: Record<string, unknown> }[] = [];
    const deadQueue = deadQueueOf(queue);
    for (let message = await broker.basicGet(deadQueue); message; ) {
      const headers = message.headers ?? {};
      dead.push({ reason: String(headers[errorHeader]), body: message.body, headers });
      message = await broker.basicGet(deadQueue);
    }
    expect(dead.map((d) => d.reason).sort()).toEqual([
      'body: is not JSON',
      'body: is not JSON',
      'colour: is not a known field',
      expect.stringMatching(/^extra_consents\[1\]: Invalid option: expected one of "BASIC"\|/),
      'removed_consents: BASIC is also an extra consent',
      'user_id: is required',
      'user_id: must not contain U+FFFD (bytes that were not UTF-8 decode to it)',
    ]);
    const badConsent = dead.find((d) => d.reason.startsWith('extra_consents'));
    expect(badConsent?.headers['x-tenant']).toBe('eu-1');
    expect(badConsent?.body).toEqual({
      user_id: 'amqp_bad_consent',
      extra_consents: ['TARGETING', 'NOPE'],
    });

    await h.idle();
    expect(created() - before).toBe(1);
    expect(h.sandbox.state.isEnrolled('amqp_valid_1')).toBe(true);
    expect(h.sandbox.state.isEnrolled('amqp_bad_consent')).toBe(false);
    await intake?.close();
    expect(await readyCount(queue)).toBe(0);
  });

  it('a dead letter keeps the original bytes, properties and headers', async () => {
    const queue = await newQueue();
    const { counts } = await start(queue);
    const raw = Buffer.from('{"user_id": 42, "note": "\u00e9t\u00e9"}\n', 'utf8');
    await publisher.send(
      {
        routingKey: queue,
        messageId: 'm-1',
        correlationId: 'c-1',
        type: 'signup',
        appId: 'crm',
        headers: { 'x-tenant': 'eu-1' },
      },
      raw,
    );
    await waitFor('rejected', () => (counts.rejected === 1 ? true : undefined));
    const message = await broker.basicGet(deadQueueOf(queue));
    expect(message?.body).toEqual(raw);
    expect(message).toMatchObject({
      messageId: 'm-1',
      correlationId: 'c-1',
      type: 'signup',
      appId: 'crm',
      durable: true,
      headers: {
        'x-tenant': 'eu-1',
        [errorHeader]: 'user_id: must be a string; note: is not a known field',
      },
    });
  });

  it('a message with hundreds of unknown fields goes to .dead too, its reason naming five', async () => {
    const queue = await newQueue();
    const { counts } = await start(queue);
    const profile = Object.fromEntries(
      Array.from({ length: 800 }, (_, i) => [`profile_field_${i}`, i]),
    );
    await publish(queue, [{ user_id: 'amqp_profile', ...profile }]);
    await waitFor('rejected', () => (counts.rejected === 1 ? true : undefined));
    const message = await broker.basicGet(deadQueueOf(queue));
    const reason = String(message?.headers?.[errorHeader]);
    expect(reason).toMatch(/^profile_field_0, profile_field_1, .*profile_field_4 \(\+795 more\)/);
    expect(reason.length).toBeLessThan(200);
    expect(await readyCount(queue)).toBe(0);
  });

  it('queues an operator declared, quorum or bounded by x-max-length, are used as they are', async () => {
    const queue = testAmqpQueue();
    declared.push(queue, deadQueueOf(queue));
    await broker.queueDeclare({
      queue,
      durable: true,
      arguments: { 'x-queue-type': 'quorum' },
    });
    await broker.queueDeclare({
      queue: deadQueueOf(queue),
      durable: true,
      arguments: { 'x-max-length': 1000 },
    });
    const { counts } = await start(queue, { prefetch: 1 });
    await publish(queue, [{ user_id: '' }, { user_id: 'amqp_quorum' }]);
    await waitFor('both handled', () =>
      counts.accepted + counts.rejected === 2 ? true : undefined,
    );
    expect(counts).toMatchObject({ accepted: 1, rejected: 1 });
    expect(await readyCount(deadQueueOf(queue))).toBe(1);
  });

  it('queues missing are declared, durable; one deleted mid-run is declared again', async () => {
    const queue = testAmqpQueue();
    declared.push(queue, deadQueueOf(queue));
    const { counts } = await start(queue);
    await publish(queue, [{ user_id: 'amqp_declared' }]);
    await waitFor('accepted', () => (counts.accepted === 1 ? true : undefined));
    await broker.queueDelete({ queue });
    await waitFor('declared again', () =>
      broker.queueDeclare({ queue, passive: true }).then(
        () => true,
        () => undefined,
      ),
    );
    await waitFor('consuming again', () =>
      intake?.check().then(
        () => true,
        () => undefined,
      ),
    );
    await publish(queue, [{ user_id: 'amqp_declared_again' }]);
    await waitFor('accepted again', () => (counts.accepted === 2 ? true : undefined));
  });

  it('logs a queue it cannot declare, with the broker’s refusal', async () => {
    const lines: string[] = [];
    const logger = pino(
      { level: 'info' },
      new Writable({
        write(chunk, _encoding, done) {
          lines.push(String(chunk));
          done();
        },
      }),
    );
    // amq.* is reserved: RabbitMQ refuses to declare it (ACCESS_REFUSED).
    await start(`amq.${testAmqpQueue()}`, { logger, startTimeoutMs: 1000 });
    await waitFor('the refusal logged', () =>
      lines.some((line) => line.includes('ACCESS_REFUSED')) ? true : undefined,
    );
  });

  it('a dead letter whose headers no longer fit a frame goes without them, not redelivered for ever', async () => {
    const queue = await newQueue();
    const { counts } = await start(queue, { prefetch: 1 });
    // The largest headers a frame holds (131,072 bytes) less the reason's room: the message
    // fits, its dead letter with x-perks-error does not.
    const context = 'a'.repeat(130_950);
    await publisher.send(
      { routingKey: queue, durable: true, headers: { 'x-context': context } },
      { user_id: '', colour: 'red' },
    );
    await publish(queue, [{ user_id: 'amqp_behind_large_headers' }]);
    await waitFor('both handled', () =>
      counts.accepted + counts.rejected === 2 ? true : undefined,
    );
    const message = await broker.basicGet(deadQueueOf(queue));
    expect(message?.headers).toEqual({
      [errorHeader]: 'user_id: must not be empty; colour: is not a known field',
      'x-perks-dropped-headers': 'x-context',
      'x-perks-body': 'json reserialized',
    });
    expect(message?.body).toEqual({ user_id: '', colour: 'red' });
  });

  it('while Redis is unreachable, messages stay unacked and are requeued with backoff; all are enrolled once it is back', async () => {
    const queue = await newQueue();
    const proxy = await startTcpProxy(targetOf(h.config.redis.url));
    const proxied = createRedisConnection({ url: proxy.urlFor(h.config.redis.url) }, 'producer');
    await connected(proxied);
    cleanups.push(async () => {
      proxied.disconnect();
      await proxy.close();
    });
    let adds = 0;
    const proxiedQueues = queuesWith(proxied, () => void adds++);
    const { counts } = await start(queue, { queues: proxiedQueues, prefetch: 20 });
    const before = created();
    proxy.pause();

    await publish(queue, signups('redis-down', 40));
    await sleep(3000);
    expect(counts).toEqual({ accepted: 0, duplicate: 0, rejected: 0 });
    expect(await queueDepth(queue)).toBe(40); // none acked
    // 20 held at a time, each tried again after 0.25 s, growing: about 5 rounds, not thousands.
    expect(adds).toBeGreaterThanOrEqual(20);
    expect(adds).toBeLessThan(20 * 12);

    proxy.resume();
    await waitFor('40 enqueued', () => (counts.accepted === 40 ? true : undefined), 20_000);
    await h.idle();
    expect(created() - before).toBe(40);
    await intake?.close();
    expect(await queueDepth(queue)).toBe(0);
  }, 40_000);

  it('the broker closes the connection mid-run: the intake reconnects and each signup is enrolled once', async () => {
    const queue = await newQueue();
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        lines.push(chunk.toString('utf8'));
        done();
      },
    });
    // 50 ms per enqueue, 10 at a time, and from the 60th on none until the broker has closed
    // the connection: the close lands while messages are being handled, however slow the machine.
    let enqueues = 0;
    let closed = false;
    const slowQueues = queuesWith(redis, async () => {
      await sleep(50);
      enqueues += 1;
      while (enqueues > 60 && !closed) await sleep(20);
    });
    const { counts } = await start(queue, {
      queues: slowQueues,
      prefetch: 10,
      logger: pino({ level: 'info' }, sink),
    });
    const before = created();
    const all = signups('broker-drop', 800);

    await publish(queue, all.slice(0, 600));
    await waitFor('some handled', () => (counts.accepted >= 50 ? true : undefined));
    expect(await closeBrokerConnections(`pid ${process.pid}`)).toBe(1);
    closed = true;
    expect(counts.accepted).toBeLessThan(600);
    await publish(queue, all.slice(600));

    await waitFor('800 enrollments upstream', () => (created() - before >= 800 ? true : undefined));
    await h.idle();
    await intake?.check();
    await intake?.close();
    expect(created() - before).toBe(800);
    expect(counts.accepted + counts.duplicate).toBeGreaterThanOrEqual(800);
    expect(await readyCount(queue)).toBe(0);
    expect(await readyCount(deadQueueOf(queue))).toBe(0);
    const messages = lines.map((line) => (JSON.parse(line) as { msg: string }).msg);
    expect(messages).toContain('rabbitmq unreachable; retrying');
    expect(messages).toContain('rabbitmq connection restored');
    expect(lines.join('\n')).not.toContain('guest:guest');
  }, 40_000);

  it('check() rejects while the broker is unreachable and resolves once it is back, at start and mid-run', async () => {
    const queue = await newQueue();
    const proxy: TcpProxy = await startTcpProxy({ host: '127.0.0.1', port: 5672 });
    cleanups.push(() => proxy.close());
    proxy.pause();
    const url = amqpUrl.replace(/@[^/]+/, `@127.0.0.1:${proxy.port}`);
    const before = created();

    const { counts } = await start(queue, { url, startTimeoutMs: 300 });
    await expect(intake?.check()).rejects.toThrow('not connected');
    await publish(queue, signups('unreachable-a', 50));
    proxy.resume();
    await waitFor('ready', () => intake?.check().then(() => true), 15_000);
    await waitFor('first 50', () => (counts.accepted === 50 ? true : undefined));

    proxy.pause();
    await waitFor('not ready', () =>
      intake?.check().then(
        () => undefined,
        (error: Error) => error.message,
      ),
    ).then((message) => expect(message).toBe('not connected'));
    await publish(queue, signups('unreachable-b', 50));
    await sleep(500);
    expect(counts.accepted).toBe(50);
    proxy.resume();
    await waitFor('ready again', () => intake?.check().then(() => true), 15_000);
    // Acks sent just before the cut may be lost with it: those messages come again.
    await waitFor('100 enrollments upstream', () => (created() - before >= 100 ? true : undefined));
    await h.idle();
    expect(created() - before).toBe(100);
    expect(counts.accepted + counts.duplicate).toBeGreaterThanOrEqual(100);
    await intake?.close();
    expect(await queueDepth(queue)).toBe(0);
  }, 40_000);
});
