/**
 * The RabbitMQ intake, a signup per message: acked once its job is in Redis; Redis refusing, it
 * is requeued after a pause (0.25 to 5 s) so the consumer does not spin. An invalid one goes,
 * confirmed, to `<queue>.dead` with the reason in `x-perks-error` (which plain dead-lettering
 * cannot add), then is acked. The broker requeues what a lost channel left unacked: at least
 * once, a second time meeting deduplication or a 409.
 *
 * Both queues are declared (durable) only when missing: one an operator declared, a quorum
 * queue or one bounded by `x-max-length`, is used as it is.
 */
import { setMaxListeners } from 'node:events';
import { hostname } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  AMQPChannelError,
  AMQPConnectionError,
  type AsyncMessage,
  Connection,
  ConsumerStatus,
  type Envelope,
  type Publisher,
} from 'rabbitmq-client';
import { redactUrl } from '../config.js';
import { clip } from '../errors.js';
import { NotReadyError } from '../ops/health.js';
import type { Logger } from '../ops/logger.js';
import { type Outage, oncePerOutage, outageLogger } from '../ops/outage.js';
import { within } from '../ops/timeouts.js';
import type { ContinueTrace } from '../ops/tracing.js';
import { describeProblems } from '../queues/payloads.js';
import { enqueueEnrollments } from '../queues/producer.js';
import { type Checked, checkSignup, type Door, onlyKeyMissing } from './signups.js';

export interface AmqpIntakeOptions extends Door {
  /** INTAKE_AMQP_URL, logged redacted. */
  url: string;
  /** INTAKE_AMQP_QUEUE: consumed, declared durable. */
  queue: string;
  /** INTAKE_AMQP_PREFETCH: unacked messages held, and handled, at once. */
  prefetch: number;
  /** How long the start waits for the broker before going on trying. Default 10 000. */
  startTimeoutMs?: number;
  /** How long `close()` waits for running handlers. Default 5000. */
  closeTimeoutMs?: number;
}

/** The header that says why a message was dead-lettered: `user_id: must not be empty`. */
export const errorHeader = 'x-perks-error';

export const deadQueueOf = (queue: string) => `${queue}.dead`;

export type AmqpIntake = Awaited<ReturnType<typeof startAmqpIntake>>;

export async function startAmqpIntake(options: AmqpIntakeOptions) {
  const log = options.logger.child({ intake: 'amqp', queue: options.queue });
  const stopping = new AbortController();
  // One listener per handler pausing after a refusal: up to `prefetch` at once.
  setMaxListeners(options.prefetch + 10, stopping.signal);
  const connection = new Connection({
    url: options.url,
    connectionName: `perks-worker intake ${hostname()} pid ${process.pid}`,
    retryLow: 500,
    retryHigh: 10_000,
    // RabbitMQ's own default (the client's is 8192): a dead letter's headers, those of its
    // message and the reason, must fit one frame.
    frameMax: 131_072,
  });
  const brokerOutage = outageLogger(log, 'rabbitmq unreachable; retrying');
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
  const consumer = connection.createConsumer(
    {
      queue: options.queue,
      // Passive: a declaration must repeat the queue's arguments or RabbitMQ refuses it.
      queueOptions: { passive: true },
      qos: { prefetchCount: options.prefetch },
      concurrency: options.prefetch,
      requeue: true,
    },
    messageHandler(options, connection, { publisher, log, brokerOutage, stopping }),
  );
  const deadQueue = deadQueueOf(options.queue);
  // One run at a time, a queue after the other: a refusal closes the channel they share, and
  // the first error is the one that says why.
  let declaring: Promise<void> | undefined;
  const declareMissing = () => {
    declaring ??= (async () => {
      for (const queue of [options.queue, deadQueue]) await ensureQueue(connection, queue);
    })().finally(() => {
      declaring = undefined;
    });
    return declaring;
  };
  // A queue missing fails the consumer's setup, one deleted cancels it: declared here, it is
  // there for the consumer's next try (0.5 s or more); one refused (amq.*, no right) is logged.
  const redeclare = () => void declareMissing().catch(brokerOutage.error);
  redeclare();
  connection.on('connection', redeclare);
  consumer.on('error', (error: Error) => {
    redeclare();
    if (codeOf(error) !== 'NOT_FOUND') brokerOutage.error(error);
  });
  const consuming = new Promise<void>((resolve) => consumer.once('ready', resolve));
  const started = await within(options.startTimeoutMs ?? 10_000, consuming);
  log.info(
    { url: redactUrl(options.url), prefetch: options.prefetch, deadQueue },
    started ? 'rabbitmq intake consuming' : 'rabbitmq not reachable yet; consuming once it is',
  );
  return {
    /** Resolves while connected and consuming; rejects with a NotReadyError otherwise. */
    async check(): Promise<void> {
      if (!connection.ready) throw new NotReadyError('not connected');
      // Empty while the consumer sets itself up again after a lost channel.
      if (consumer.consumerTag === '') throw new NotReadyError('not consuming');
    },
    /** Stops consuming, lets running handlers finish (bounded), closes the connection. */
    async close(): Promise<void> {
      stopping.abort();
      const handlersDone = consumer.close().then(() => publisher.close());
      const closing = handlersDone.then(() => connection.close());
      // The broker requeues whatever the dropped connection had not acked.
      if (!(await within(options.closeTimeoutMs ?? 5000, closing))) connection.unsafeDestroy();
    },
  };
}

/** Acks a message once enqueued or dead-lettered; requeues it after a pause otherwise. */
function messageHandler(
  options: AmqpIntakeOptions,
  connection: Connection,
  ctx: { publisher: Publisher; log: Logger; brokerOutage: Outage; stopping: AbortController },
) {
  const { queues, consumerIdKey, metrics } = options;
  const inTraceOf: ContinueTrace = options.continueTrace ?? ((_headers, fn) => fn());
  const deadQueue = deadQueueOf(options.queue);
  const retryPause = outagePause();
  // Its own: this replica never gets the key while it runs, whatever else gets enqueued.
  const keyPause = outagePause();
  const redisOutage = outageLogger(ctx.log, 'cannot enqueue signups; messages requeued');
  const deadOutage = outageLogger(ctx.log, `cannot move invalid signups to ${deadQueue}; requeued`);
  const keyOutage = outageLogger(ctx.log, 'signups need PERKS_CONSUMER_ID_KEY; messages requeued');
  // At most a line a minute: a flood of invalid messages shows in the metrics, not the log.
  const rejections = oncePerOutage((error) =>
    ctx.log.warn(
      { reason: error.message },
      `invalid signup message moved to ${deadQueue}; the next ones are only counted`,
    ),
  );
  return async (message: AsyncMessage): Promise<ConsumerStatus> => {
    const body = jsonOf(message);
    const signup = body.ok ? checkSignup(body.value, consumerIdKey) : body;
    try {
      if (!signup.ok && onlyKeyMissing(signup.problems)) {
        keyOutage.error(new Error(describeProblems(signup.problems)));
        await keyPause.wait(ctx.stopping.signal);
        return ConsumerStatus.REQUEUE;
      }
      if (!signup.ok) {
        const reason = describeProblems(signup.problems);
        await deadLetter(connection, ctx.publisher, message, deadQueue, reason);
        deadOutage.recovered();
        metrics.intake('amqp', 'rejected');
        rejections.error(new Error(reason));
        return ConsumerStatus.ACK;
      }
      const [enqueued] = await inTraceOf(message.headers ?? {}, () =>
        enqueueEnrollments(queues, [signup.value]),
      );
      retryPause.recovered();
      redisOutage.recovered();
      metrics.intake('amqp', enqueued?.alreadyPending ? 'duplicate' : 'accepted');
      return ConsumerStatus.ACK;
    } catch (error) {
      // Redis (or the broker, for a dead letter) refused: keep the message, after a pause.
      (signup.ok ? redisOutage : deadOutage).error(error);
      await retryPause.wait(ctx.stopping.signal);
      return ConsumerStatus.REQUEUE;
    }
  };
}

/** Declares a queue, durable, unless it exists (whatever its arguments). */
async function ensureQueue(connection: Connection, queue: string): Promise<void> {
  try {
    await connection.queueDeclare({ queue, passive: true });
  } catch (error) {
    if (codeOf(error) !== 'NOT_FOUND') throw error;
    await connection.queueDeclare({ queue, durable: true });
  }
}

const codeOf = (error: unknown) => (error instanceof AMQPChannelError ? error.code : undefined);

/**
 * Publishes a message's dead letter, confirmed, after checking its queue is there (a confirmed
 * publish to a missing queue is dropped in silence). One the broker or the frame refuses for
 * what it holds goes again without the message's headers (named in `x-perks-dropped-headers`),
 * so that no message is redelivered for ever.
 */
async function deadLetter(
  connection: Connection,
  publisher: Publisher,
  message: AsyncMessage,
  deadQueue: string,
  reason: string,
): Promise<void> {
  await ensureQueue(connection, deadQueue);
  const body = bodyBytes(message);
  try {
    await publisher.send(deadLetterOf(message, deadQueue, reason, message.headers), body);
  } catch (error) {
    if (!(error instanceof AMQPChannelError) || error instanceof AMQPConnectionError) throw error;
    const names = Object.keys(message.headers ?? {}).join(', ');
    const dropped = { 'x-perks-dropped-headers': clip(names, reasonMaxChars) };
    await publisher.send(deadLetterOf(message, deadQueue, reason, dropped), body);
  }
}

/** rabbitmq-client parses an `application/json` body (leaving the bytes when that fails). */
const parsedByClient = (message: AsyncMessage) =>
  message.contentType === 'application/json' &&
  !message.contentEncoding &&
  !Buffer.isBuffer(message.body);

/**
 * The body as sent, but where rabbitmq-client decoded it: a body it parsed is the same JSON
 * serialised again, a `text/plain` one is its UTF-8 decoding (bytes that were not UTF-8 are
 * U+FFFD). Such a dead letter says so in `x-perks-body`.
 */
function bodyBytes(message: AsyncMessage): Buffer {
  const body: unknown = message.body;
  if (Buffer.isBuffer(body)) return body;
  return Buffer.from(parsedByClient(message) ? JSON.stringify(body) : String(body), 'utf8');
}

function jsonOf(message: AsyncMessage): Checked<unknown> {
  if (parsedByClient(message)) return { ok: true, value: message.body };
  try {
    return { ok: true, value: JSON.parse(bodyBytes(message).toString('utf8')) };
  } catch {
    return { ok: false, problems: [{ field: 'body', message: 'is not JSON' }] };
  }
}

/**
 * The dead letter of a message: durable, its properties but `expiration` (it must wait to be
 * read) and `userId` (the broker checks it against the publisher), the reason in a header.
 */
function deadLetterOf(
  message: AsyncMessage,
  deadQueue: string,
  reason: string,
  headers: AsyncMessage['headers'],
): Envelope {
  const { contentType, contentEncoding, priority, correlationId, replyTo } = message;
  const { messageId, timestamp, type, appId } = message;
  const kept = { contentType, contentEncoding, priority, correlationId, replyTo, messageId };
  const all = Object.entries({ ...kept, timestamp, type, appId });
  return {
    ...Object.fromEntries(all.filter(([, value]) => value !== undefined)),
    exchange: '',
    routingKey: deadQueue,
    headers: { ...headers, [errorHeader]: clip(reason, reasonMaxChars), ...decodedBody(message) },
    durable: true,
  };
}

const decodedBody = (message: AsyncMessage) =>
  Buffer.isBuffer(message.body)
    ? {}
    : { 'x-perks-body': parsedByClient(message) ? 'json reserialized' : 'utf-8 decoded' };

/** A reason of hundreds of unknown fields must still fit the header frame (frameMax 8192). */
const reasonMaxChars = 1000;

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
