/**
 * The HTTP intake of `work`, for signup services in any language:
 *   POST /v1/enrollments  {"user_id", "extra_consents"?, "removed_consents"?} or 1..1000 of them
 *   POST /v1/syncs        {"consumer_id"} or 1..1000 of them
 * Every request carries `Authorization: Bearer <INTAKE_TOKEN>`. A request is all or nothing:
 * one invalid item refuses it whole (400, each problem named), and a 202 is only sent once
 * every job is in Redis (Redis away: 503, retry; deduplication absorbs the retry).
 *
 * fastify does the HTTP edges: a streaming 1 MiB body limit (413), JSON only (415), bad JSON
 * (400), prototype-poisoning-safe parsing, and request timeouts.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import Fastify, { type FastifyError, type FastifyReply, type FastifyRequest } from 'fastify';
import { PortInUseError } from '../ops/health.js';
import type { Logger } from '../ops/logger.js';
import type { IntakeMetrics } from '../ops/metrics.js';
import { oncePerOutage } from '../ops/outage.js';
import { withTimeout } from '../ops/timeouts.js';
import type { ContinueTrace } from '../ops/tracing.js';
import type { Queues } from '../queues/queues.js';
import {
  type Checked,
  checkAll,
  checkSignup,
  checkSyncRequest,
  enqueueSignups,
  enqueueSyncs,
  maxItemsPerRequest,
  type SignupProblem,
} from './signups.js';

export interface HttpIntakeOptions {
  port: number;
  host: string;
  /** INTAKE_TOKEN: the bearer token every caller sends. */
  token: string;
  /** On a fail-fast Redis connection: a request must learn at once that Redis is away. */
  queues: Queues;
  consumerIdKey: string | undefined;
  logger: Logger;
  metrics: IntakeMetrics;
  /** With tracing on: a request's jobs continue the trace of its `traceparent` header. */
  continueTrace?: ContinueTrace;
}

export interface HttpIntake {
  /** The port listened on (INTAKE_PORT, or the one picked for 0). */
  port: number;
  close(): Promise<void>;
}

const bodyLimitBytes = 1024 * 1024;
/** A Redis that has not answered by then is treated as away. */
const enqueueTimeoutMs = 5000;
const routes = ['/v1/enrollments', '/v1/syncs'];

export async function startHttpIntake(options: HttpIntakeOptions): Promise<HttpIntake> {
  const { queues, consumerIdKey, logger, metrics } = options;
  const inTraceOf: ContinueTrace = options.continueTrace ?? ((_headers, fn) => fn());
  const app = Fastify({
    logger: false,
    bodyLimit: bodyLimitBytes,
    requestTimeout: 30_000,
    connectionTimeout: 30_000,
    return503OnClosing: true,
  });
  // JSON only: fastify would otherwise parse text/plain into a string.
  app.removeContentTypeParser('text/plain');
  const authorized = bearerCheck(options.token);
  const redisOutage = oncePerOutage((error) =>
    logger.error(
      { err: { message: error.message } },
      'intake: cannot enqueue, Redis unreachable; answering 503',
    ),
  );

  // Before routing and body parsing: no caller without the token learns anything, not even
  // which paths exist.
  app.addHook('onRequest', async (request, reply) => {
    if (!authorized(request.headers.authorization)) {
      return reply
        .code(401)
        .header('www-authenticate', 'Bearer')
        .send({ error: 'missing or wrong bearer token (INTAKE_TOKEN)' });
    }
  });

  app.post('/v1/enrollments', async (request, reply) => {
    const items = itemsOf(request.body);
    const checked = items.ok
      ? checkAll(items.value, (item, index) => checkSignup(item, consumerIdKey, index))
      : items;
    if (!checked.ok) return refuse(reply, checked.problems, items.ok ? items.value.length : 1);
    const accepted = await enqueued(reply, () =>
      inTraceOf(request.headers, () => enqueueSignups(queues, checked.value)),
    );
    if (!accepted) return reply;
    const duplicates = accepted.filter((a) => a.duplicate).length;
    metrics.intake('http', 'accepted', accepted.length - duplicates);
    metrics.intake('http', 'duplicate', duplicates);
    return reply.code(202).send({
      enrollments: accepted.map((a) => ({
        user_id: a.userId,
        consumer_id: a.consumerId,
        job_id: a.jobId,
        duplicate: a.duplicate,
      })),
    });
  });

  app.post('/v1/syncs', async (request, reply) => {
    const items = itemsOf(request.body);
    const checked = items.ok ? checkAll(items.value, checkSyncRequest) : items;
    if (!checked.ok) return refuse(reply, checked.problems, items.ok ? items.value.length : 1);
    const syncs = await enqueued(reply, () =>
      inTraceOf(request.headers, () => enqueueSyncs(queues, checked.value)),
    );
    if (!syncs) return reply;
    metrics.intake('http', 'accepted', syncs.length);
    return reply.code(202).send({
      syncs: syncs.map((s) => ({ consumer_id: s.consumerId, job_id: s.jobId })),
    });
  });

  // A known path with another method: 405 naming the one allowed.
  for (const url of routes) {
    app.route({
      method: ['GET', 'HEAD', 'PUT', 'DELETE', 'PATCH', 'OPTIONS'],
      url,
      handler: async (_request, reply) =>
        reply
          .code(405)
          .header('allow', 'POST')
          .send({ error: `${url} accepts POST only` }),
    });
  }
  app.setNotFoundHandler(async (request, reply) =>
    reply.code(404).send({ error: `no such path: ${request.method} ${request.url.split('?')[0]}` }),
  );
  // fastify's own refusals (413, 415, bad JSON) and anything unexpected, in our envelope.
  app.setErrorHandler(async (error: FastifyError, _request: FastifyRequest, reply) => {
    const status = error.statusCode && error.statusCode >= 400 ? error.statusCode : 500;
    if (status >= 500) {
      logger.error({ err: { message: error.message } }, 'intake: request failed');
      return reply.code(500).send({ error: 'internal error; nothing was accepted' });
    }
    const message =
      status === 413
        ? `body larger than ${bodyLimitBytes} bytes`
        : status === 415
          ? 'content-type must be application/json'
          : error.message;
    return reply.code(status).send({ error: message });
  });

  /**
   * Runs an enqueue; when Redis fails or does not answer in time, answers 503 and resolves
   * undefined. An enqueue that lands after the 503 is absorbed by the caller's retry
   * (deduplication), and was never claimed.
   */
  async function enqueued<T>(reply: FastifyReply, run: () => Promise<T>): Promise<T | undefined> {
    try {
      const result = await withTimeout(run(), enqueueTimeoutMs);
      redisOutage.recovered();
      return result;
    } catch (error) {
      redisOutage.error(error instanceof Error ? error : new Error(String(error)));
      await reply.code(503).header('retry-after', '5').send({
        error: 'the queue store (Redis) is unreachable; nothing was accepted, retry later',
      });
      return undefined;
    }
  }

  function refuse(reply: FastifyReply, problems: SignupProblem[], items: number) {
    metrics.intake('http', 'rejected', items);
    const first = problems[0];
    return reply.code(400).send({
      error: `invalid request, nothing was accepted: ${problems.length} problem(s), the first in item ${first?.index}, ${first?.field}: ${first?.message}`,
      errors: problems,
    });
  }

  try {
    await app.listen({ port: options.port, host: options.host });
  } catch (error) {
    await app.close();
    if ((error as NodeJS.ErrnoException).code === 'EADDRINUSE') {
      throw new PortInUseError('INTAKE_PORT', options.port);
    }
    throw error;
  }
  const address = app.server.address();
  return {
    port: typeof address === 'object' && address ? address.port : options.port,
    close: () => app.close(),
  };
}

/** One object, or an array of 1..1000: always a list, or the problem with the body itself. */
function itemsOf(body: unknown): Checked<unknown[]> {
  if (!Array.isArray(body)) return { ok: true, value: [body] };
  if (body.length >= 1 && body.length <= maxItemsPerRequest) return { ok: true, value: body };
  return {
    ok: false,
    problems: [
      {
        index: 0,
        field: '(body)',
        message: `must be one object or an array of 1 to ${maxItemsPerRequest}, got ${body.length}`,
      },
    ],
  };
}

/**
 * Compares the Authorization header with the token in constant time: both sides are hashed
 * first, so neither the content nor the length of the token leaks through timing.
 */
function bearerCheck(token: string): (header: string | undefined) => boolean {
  const expected = createHash('sha256').update(`Bearer ${token}`).digest();
  return (header) =>
    header !== undefined && timingSafeEqual(createHash('sha256').update(header).digest(), expected);
}
