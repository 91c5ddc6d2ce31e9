import { type DefaultJobOptions, Queue, type Telemetry } from 'bullmq';
import type { JobsConfig } from '../config.js';
import type { Logger } from '../ops/logger.js';
import { oncePerOutage } from '../ops/outage.js';
import type { RedisClient } from '../redis/connection.js';
import { type QueueKind, queueNames } from './names.js';

/** What jobs carry by default, whoever enqueues them (our CLI, the worker, a client service). */
export type JobPolicy = JobsConfig;

export const defaultJobPolicy: JobPolicy = {
  jobAttempts: 8,
  jobBackoffMs: 5000,
  keepCompletedJobs: 1000,
  keepFailedJobs: 10_000,
};

export type Queues = Record<QueueKind, Queue>;

/**
 * The stack traces a job keeps: its last attempts'. BullMQ keeps every one by default, and a
 * webhook delivery job is retried for days; the last is what `failed` reads.
 */
const stackTraceLimit = 3;

/**
 * Times a job may return to wait from a dead replica (SIGKILL, OOM, a lost node) before BullMQ
 * fails it for good: a worker option of every queue's workers. BullMQ's default, 1, failed a
 * long sync or a reconciliation killed under two replicas in turn; a job that itself kills
 * every replica still ends after this many.
 */
export const maxStalledCount = 10;

/**
 * Every queue on one shared connection (Queue objects do not block), logging the first
 * error of an outage, not every reconnect. With `telemetry`, a job carries its producer's trace.
 */
export function openQueues(
  connection: RedisClient,
  prefix: string,
  policy: JobPolicy,
  logger?: Logger,
  telemetry?: Telemetry,
): Queues {
  const outage = oncePerOutage((error) =>
    logger?.warn({ err: { message: error.message } }, 'queue connection error; retrying'),
  );
  connection.on('ready', outage.recovered);
  const defaultJobOptions: DefaultJobOptions = {
    attempts: policy.jobAttempts,
    backoff: { type: 'exponential', delay: policy.jobBackoffMs, jitter: 0.5 },
    removeOnComplete: { count: policy.keepCompletedJobs },
    removeOnFail: { count: policy.keepFailedJobs },
    stackTraceLimit,
  };
  const open = (kind: QueueKind) => {
    const options = { connection, prefix, defaultJobOptions, ...(telemetry ? { telemetry } : {}) };
    const queue = new Queue(queueNames[kind], options);
    queue.on('error', outage.error);
    return queue;
  };
  // Webhook delivery jobs set their own attempts, backoff and retention (src/events).
  const kinds = Object.keys(queueNames) as QueueKind[];
  return Object.fromEntries(kinds.map((kind) => [kind, open(kind)])) as Queues;
}

export async function closeQueues(queues: Queues): Promise<void> {
  await Promise.all(Object.values(queues).map((queue) => queue.close()));
}
