/**
 * The RabbitMQ intake: each message of the queue is one signup, checked and enqueued like
 * those of the other intake paths (signups.ts).
 *
 * - A message is acked only once its job is in Redis. When Redis refuses, the handler waits
 *   (as long as the outage has lasted so far, 0.25 to 5 s) and nacks it with requeue: the
 *   broker keeps it, and the consumer does not spin on it.
 * - An invalid message is published, confirmed, to `<queue>.dead` with the reason in the
 *   header `x-perks-error`, then acked. Plain dead-lettering cannot add a header of our own.
 * - rabbitmq-client reconnects with backoff and declares the queue and QoS again. The broker
 *   requeues what was unacked on a lost channel, so a signup is enqueued at least once; a
 *   second time meets the pending job's deduplication, or an enrollment that answers 409.
 */
import { setMaxListeners } from 'node:events';
import { hostname } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { type AsyncMessage, Connection, ConsumerStatus, type HeaderFields } from 'rabbitmq-client';
import { redactUrl } from '../config.js';
import { NotReadyError } from '../ops/health.js';
import type { Logger } from '../ops/logger.js';
import type { IntakeMetrics } from '../ops/metrics.js';
import { oncePerOutage } from '../ops/outage.js';
import { within } from '../ops/timeouts.js';
import type { ContinueTrace } from '../ops/tracing.js';
import type { Queues } from '../queues/queues.js';
import { checkSignup, enqueueSignups, type Signup, type SignupProblem } from './signups.js';

export interface AmqpIntakeOptions {
  /** INTAKE_AMQP_URL: `amqp://` or `amqps://`, with user and password. Logged redacted. */
  url: string;
  /** INTAKE_AMQP_QUEUE: consumed, declared durable. Invalid messages go to `<queue>.dead`. */
  queue: string;
  /** INTAKE_AMQP_PREFETCH: unacked messages held at once, all of them handled concurrently. */
  prefetch: number;
  /** Queues on a fail-fast ('producer') connection, so that a Redis outage shows at once. */
  queues: Queues;
  consumerIdKey: string | undefined;
  logger: Logger;
  metrics: IntakeMetrics;
  /** How long the start waits for the broker; past it, the intake goes on trying. Default 10 000. */
  startTimeoutMs?: number;
  /** How long `close()` waits for running handlers before dropping the connection. Default 5000. */
  closeTimeoutMs?: number;
  /** With tracing on: a message's job continues the trace of its `traceparent` header. */
  continueTrace?: ContinueTrace;
}

export interface AmqpIntake {
  /** Resolves while connected and consuming; rejects with a NotReadyError otherwise. */
  check(): Promise<void>;
  /** Stops consuming, lets running handlers finish (bounded), closes the connection. */
  close(): Promise<void>;
}

/** The header that says why a message was dead-lettered: `user_id: must not be empty`. */
export const errorHeader = 'x-perks-error';

export function deadQueueOf(queue: string): string {
  return `${queue}.dead`;
}

export async function startAmqpIntake(options: AmqpIntakeOptions): Promise<AmqpIntake> {
  const { queue, queues, consumerIdKey, logger, metrics } = options;
  const inTraceOf: ContinueTrace = options.continueTrace ?? ((_headers, fn) => fn());
  const deadQueue = deadQueueOf(queue);
  const log = logger.child({ intake: 'amqp', queue });
  const stopping = new AbortController();
  // One listener per handler pausing after a refusal: up to `prefetch` at once.
  setMaxListeners(options.prefetch + 10, stopping.signal);
  const retryPause = outagePause();

  const connection = new Connection({
    url: options.url,
    connectionName: `perks-worker intake ${hostname()} pid ${process.pid}`,
    retryLow: 500,
    retryHigh: 10_000,
  });
  const brokerOutage = oncePerOutage((error) =>
    log.warn({ err: { message: error.message } }, 'rabbitmq unreachable; retrying'),
  );
  const redisOutage = oncePerOutage((error) =>
    log.warn({ err: { message: error.message } }, 'cannot enqueue signups; messages requeued'),
  );
  // At most a line a minute: a flood of invalid messages shows in the metrics, not the log.
  const rejections = oncePerOutage((error) =>
    log.warn(
      { reason: error.message },
      `invalid signup message moved to ${deadQueue}; the next ones are only counted`,
    ),
  );
  let wasDown = false;
  connection.on('error', (error: Error) => {
    wasDown = true;
    brokerOutage.error(error);
  });
  connection.on('connection', () => {
    brokerOutage.recovered();
    if (wasDown) log.info('rabbitmq connection restored');
    wasDown = false;
  });

  const publisher = connection.createPublisher({ confirm: true });

  async function deadLetter(message: AsyncMessage, reason: string): Promise<void> {
    // Declared before each publish: a confirmed publish to a queue that was deleted is
    // dropped in silence. Invalid messages are rare, so the round trip costs nothing.
    await connection.queueDeclare({ queue: deadQueue, durable: true });
    await publisher.send(
      {
        ...keptProperties(message),
        exchange: '',
        routingKey: deadQueue,
        headers: { ...message.headers, [errorHeader]: reason },
        // Whatever the original: a dead letter must outlive a broker restart.
        durable: true,
      },
      bodyBytes(message),
    );
  }

  async function handleMessage(message: AsyncMessage): Promise<ConsumerStatus> {
    const signup = signupOf(message, consumerIdKey);
    try {
      if (!signup.ok) {
        await deadLetter(message, signup.reason);
        metrics.intake('amqp', 'rejected');
        rejections.error(new Error(signup.reason));
        return ConsumerStatus.ACK;
      }
      const [enqueued] = await inTraceOf(message.headers ?? {}, () =>
        enqueueSignups(queues, [signup.value]),
      );
      retryPause.recovered();
      redisOutage.recovered();
      metrics.intake('amqp', enqueued?.duplicate ? 'duplicate' : 'accepted');
      return ConsumerStatus.ACK;
    } catch (error) {
      // Redis (or the broker, for a dead letter) refused: keep the message, after a pause.
      (signup.ok ? redisOutage : brokerOutage).error(asError(error));
      await retryPause.wait(stopping.signal);
      return ConsumerStatus.REQUEUE;
    }
  }

  const consumer = connection.createConsumer(
    {
      queue,
      // No x-arguments: a publisher that declares the queue too (durable) must declare
      // exactly the same, or RabbitMQ refuses one of the two declarations.
      queueOptions: { durable: true },
      qos: { prefetchCount: options.prefetch },
      concurrency: options.prefetch,
      requeue: true,
    },
    handleMessage,
  );
  consumer.on('error', (error: Error) => brokerOutage.error(error));
  const consuming = new Promise<void>((resolve) => consumer.once('ready', resolve));
  consumer.on('ready', () => {
    connection
      .queueDeclare({ queue: deadQueue, durable: true })
      .catch((error: unknown) => brokerOutage.error(asError(error)));
  });

  const started = await within(options.startTimeoutMs ?? 10_000, consuming);
  log.info(
    { url: redactUrl(options.url), prefetch: options.prefetch, deadQueue },
    started ? 'rabbitmq intake consuming' : 'rabbitmq not reachable yet; consuming once it is',
  );

  return {
    async check() {
      if (!connection.ready) throw new NotReadyError('not connected');
      // Empty while the consumer sets itself up again after a lost channel.
      if (consumer.consumerTag === '') throw new NotReadyError('not consuming');
    },
    async close() {
      stopping.abort();
      const closed = await within(
        options.closeTimeoutMs ?? 5000,
        (async () => {
          await consumer.close();
          await publisher.close();
          await connection.close();
        })(),
      );
      // The broker requeues whatever the dropped connection had not acked.
      if (!closed) connection.unsafeDestroy();
    },
  };
}

type SignupOf = { ok: true; value: Signup } | { ok: false; reason: string };

function signupOf(message: AsyncMessage, consumerIdKey: string | undefined): SignupOf {
  const body = jsonBody(message);
  if (!body.ok) return { ok: false, reason: 'body: is not JSON' };
  const checked = checkSignup(body.value, consumerIdKey);
  if (checked.ok) return checked;
  return { ok: false, reason: checked.problems.map(describeProblem).join('; ') };
}

/**
 * rabbitmq-client parses an `application/json` body itself (and leaves the bytes when that
 * fails) and decodes a `text/plain` one; any other body arrives as bytes.
 */
function jsonBody(message: AsyncMessage): { ok: true; value: unknown } | { ok: false } {
  const body: unknown = message.body;
  if (isParsedJson(message)) return { ok: true, value: body };
  try {
    return { ok: true, value: JSON.parse(bodyBytes(message).toString('utf8')) };
  } catch {
    return { ok: false };
  }
}

/** The body as sent; a body the client parsed is the same JSON serialised again. */
function bodyBytes(message: AsyncMessage): Buffer {
  const body: unknown = message.body;
  if (Buffer.isBuffer(body)) return body;
  if (isParsedJson(message)) return Buffer.from(JSON.stringify(body), 'utf8');
  return Buffer.from(String(body), 'utf8');
}

function isParsedJson(message: AsyncMessage): boolean {
  return (
    message.contentType === 'application/json' &&
    !message.contentEncoding &&
    !Buffer.isBuffer(message.body)
  );
}

/**
 * The original's properties a dead letter keeps. Not `expiration` (a dead letter must wait
 * for someone to read it) nor `userId` (the broker checks it against the publishing user).
 */
function keptProperties(message: AsyncMessage): HeaderFields {
  const { contentType, contentEncoding, priority, correlationId, replyTo } = message;
  const { messageId, timestamp, type, appId } = message;
  return definedOnly({
    contentType,
    contentEncoding,
    priority,
    correlationId,
    replyTo,
    messageId,
    timestamp,
    type,
    appId,
  });
}

function definedOnly<T extends object>(value: T): T {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as T;
}

/** `field: message`; some messages already start with their field. */
function describeProblem({ field, message }: SignupProblem): string {
  return message.startsWith(`${field}: `) ? message : `${field}: ${message}`;
}

/** Waits as long as the outage has lasted so far, 0.25 to 5 s, with jitter; aborts at close. */
function outagePause(): { wait(signal: AbortSignal): Promise<void>; recovered(): void } {
  let since: number | undefined;
  return {
    async wait(signal) {
      since ??= Date.now();
      const ms = Math.min(Math.max(Date.now() - since, 250), 5000) * (0.5 + Math.random() / 2);
      await sleep(ms, undefined, { signal }).catch(() => undefined);
    },
    recovered() {
      since = undefined;
    },
  };
}

function asError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error));
}
