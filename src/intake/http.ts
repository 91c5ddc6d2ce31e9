/**
 * The HTTP intake: `POST /v1/enrollments` (a signup, or 1..1000) and `POST /v1/syncs`
 * ({"consumer_id"}, or 1..1000), `Authorization: Bearer <INTAKE_TOKEN>`. One invalid item is a
 * 400 naming each problem, nothing enqueued; 202 once every job is in Redis, else 503 (BullMQ's
 * addBulk is a pipeline: part may be in, and jobs are deduplicated, so a retry is safe). fastify
 * does the edges: body limit (413), JSON only (415), bad JSON (400), timeouts.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import Fastify, { type FastifyError, type FastifyInstance } from 'fastify';
import { listenFailure } from '../ops/health.js';
import type { Logger } from '../ops/logger.js';
import type { IntakeOutcome } from '../ops/metrics.js';
import { type Outage, outageLogger } from '../ops/outage.js';
import { withTimeout } from '../ops/timeouts.js';
import type { ContinueTrace } from '../ops/tracing.js';
import { enqueueEnrollments, rewardSyncJob } from '../queues/producer.js';
import {
  type Checked,
  checkAll,
  checkSignup,
  checkSyncRequest,
  type Door,
  onlyKeyMissing,
} from './signups.js';

export interface HttpIntakeOptions extends Door {
  port: number;
  host: string;
  /** INTAKE_TOKEN: the bearer token every caller sends. */
  token: string;
}

const bodyLimitBytes = 1024 * 1024;
const maxItemsPerRequest = 1000;
/** A Redis that has not answered by then is treated as away. */
const enqueueTimeoutMs = 5000;

/** A POST route: how an item is checked, and the checked items enqueued and answered. */
interface BatchRoute<T> {
  url: string;
  check(item: unknown): Checked<T>;
  enqueue(values: T[]): Promise<{ body: object; counts: Partial<Record<IntakeOutcome, number>> }>;
}

export type HttpIntake = Awaited<ReturnType<typeof startHttpIntake>>;

export async function startHttpIntake(options: HttpIntakeOptions) {
  const { queues, consumerIdKey } = options;
  const app = createApp(options.token, options.logger);
  const unreachable = 'intake: cannot enqueue, Redis unreachable; answering 503';
  const redisOutage = outageLogger(options.logger, unreachable, 'error');
  batchRoute(app, options, redisOutage, {
    url: '/v1/enrollments',
    check: (item) => checkSignup(item, consumerIdKey),
    async enqueue(signups) {
      const enqueued = await enqueueEnrollments(queues, signups);
      const duplicate = enqueued.filter((e) => e.alreadyPending).length;
      const enrollments = enqueued.map((e, i) => ({
        user_id: signups[i]?.userId,
        consumer_id: e.consumerId,
        job_id: e.jobId,
        duplicate: e.alreadyPending,
      }));
      const counts = { accepted: enqueued.length - duplicate, duplicate };
      return { body: { enrollments }, counts };
    },
  });
  batchRoute(app, options, redisOutage, {
    url: '/v1/syncs',
    check: checkSyncRequest,
    async enqueue(consumerIds) {
      // One round trip. A sync already waiting for a consumer absorbs the request, so a retry
      // after a 503 enqueues none twice.
      const sync = (consumerId: string) => rewardSyncJob({ consumerId, reason: 'manual' });
      const jobs = await queues.rewardSync.addBulk(consumerIds.map(sync));
      const syncs = jobs.map((job, i) => ({ consumer_id: consumerIds[i], job_id: job.id ?? '' }));
      return { body: { syncs }, counts: { accepted: syncs.length } };
    },
  });
  try {
    await app.listen({ port: options.port, host: options.host });
  } catch (error) {
    await app.close();
    const { port, host } = options;
    throw (
      listenFailure(error, {
        portVariable: 'INTAKE_PORT',
        port,
        hostVariable: 'INTAKE_HOST',
        host,
      }) ?? error
    );
  }
  const address = app.server.address();
  return {
    /** The port listened on (INTAKE_PORT, or the one picked for 0). */
    port: typeof address === 'object' && address ? address.port : options.port,
    close: (): Promise<void> => app.close(),
  };
}

/** fastify with the bearer check, JSON only, and its refusals in our envelope. */
function createApp(token: string, logger: Logger): FastifyInstance {
  const app = Fastify({
    logger: false,
    bodyLimit: bodyLimitBytes,
    requestTimeout: 30_000,
    connectionTimeout: 30_000,
    return503OnClosing: true,
  });
  // JSON only: fastify would otherwise parse text/plain into a string.
  app.removeContentTypeParser('text/plain');
  const authorized = bearerCheck(token);
  // Before routing and parsing: without the token nothing leaks, not even which paths exist.
  app.addHook('onRequest', async (request, reply) => {
    if (!authorized(request.headers.authorization)) {
      return reply
        .code(401)
        .header('www-authenticate', 'Bearer')
        .send({ error: 'missing or wrong bearer token (INTAKE_TOKEN)' });
    }
  });
  app.setNotFoundHandler(async (request, reply) =>
    reply.code(404).send({ error: `no such path: ${request.method} ${request.url.split('?')[0]}` }),
  );
  // fastify's own refusals (413, 415, bad JSON) and anything unexpected.
  app.setErrorHandler(async (error: FastifyError, _request, reply) => {
    const status = error.statusCode && error.statusCode >= 400 ? error.statusCode : 500;
    if (status >= 500) {
      logger.error({ err: { message: error.message } }, 'intake: request failed');
      return reply.code(500).send({ error: 'internal error; nothing was accepted' });
    }
    const ours: Record<number, string> = {
      413: `body larger than ${bodyLimitBytes} bytes`,
      415: 'content-type must be application/json',
    };
    return reply.code(status).send({ error: ours[status] ?? error.message });
  });
  return app;
}

/**
 * Checks every item, then enqueues all or none; 405 for other methods. Redis failing or silent:
 * 503, and an enqueue landing after it was never claimed, deduplication absorbs the retry.
 */
function batchRoute<T>(
  app: FastifyInstance,
  { metrics, continueTrace, logger }: HttpIntakeOptions,
  redisOutage: Outage,
  route: BatchRoute<T>,
): void {
  const inTraceOf: ContinueTrace = continueTrace ?? ((_headers, fn) => fn());
  const keyOutage = outageLogger(logger, 'signups need PERKS_CONSUMER_ID_KEY; answering 503');
  app.post(route.url, async (request, reply) => {
    const items = itemsOf(request.body);
    const checked = items.ok ? checkAll(items.value, route.check) : items;
    if (!checked.ok && onlyKeyMissing(checked.problems)) {
      const error = `this replica has no PERKS_CONSUMER_ID_KEY to derive the consumer id of ${checked.problems.length} item(s) (the first: item ${checked.problems[0]?.index}); nothing was accepted, retry later`;
      keyOutage.error(new Error(error));
      return reply.code(503).header('retry-after', '30').send({ error, errors: checked.problems });
    }
    if (!checked.ok) {
      metrics.intake('http', 'rejected', items.ok ? items.value.length : 1);
      const first = checked.problems[0];
      return reply.code(400).send({
        error: `invalid request, nothing was accepted: ${checked.problems.length} problem(s), the first in item ${first?.index}, ${first?.field}: ${first?.message}`,
        errors: checked.problems,
      });
    }
    const enqueued = inTraceOf(request.headers, () => route.enqueue(checked.value));
    const answer = await withTimeout(enqueued, enqueueTimeoutMs).catch(redisOutage.error);
    if (!answer) {
      return reply.code(503).header('retry-after', '5').send({
        error:
          'the queue store (Redis) is unreachable or refused the write: retry later; part of the request may be enqueued, and a retry enqueues none of it twice',
      });
    }
    redisOutage.recovered();
    for (const [outcome, count] of Object.entries(answer.counts)) {
      metrics.intake('http', outcome as IntakeOutcome, count);
    }
    return reply.code(202).send(answer.body);
  });
  const postOnly = { error: `${route.url} accepts POST only` };
  app.route({
    method: ['GET', 'HEAD', 'PUT', 'DELETE', 'PATCH', 'OPTIONS'],
    url: route.url,
    handler: async (_request, reply) => reply.code(405).header('allow', 'POST').send(postOnly),
  });
}

/** One object, or an array of 1..1000: always a list, or the problem with the body itself. */
function itemsOf(body: unknown): ReturnType<typeof checkAll<unknown>> {
  if (!Array.isArray(body)) return { ok: true, value: [body] };
  if (body.length >= 1 && body.length <= maxItemsPerRequest) return { ok: true, value: body };
  const message = `must be one object or an array of 1 to ${maxItemsPerRequest}, got ${body.length}`;
  return { ok: false, problems: [{ index: 0, field: '(body)', message }] };
}

/** Compares in constant time: both sides hashed, neither the token nor its length leaks. */
function bearerCheck(token: string): (header: string | undefined) => boolean {
  const expected = createHash('sha256').update(`Bearer ${token}`).digest();
  return (header) =>
    header !== undefined && timingSafeEqual(createHash('sha256').update(header).digest(), expected);
}
