/** One BullMQ Worker per queue, sharing one JobContext; replicas run side by side. */
import { type Job, type Processor, type Telemetry, Worker, type WorkerOptions } from 'bullmq';
import type { z } from 'zod';
import type { WorkerConfig } from '../config.js';
import { backToWait } from '../ops/metrics-jobs.js';
import { outageLogger } from '../ops/outage.js';
import { within } from '../ops/timeouts.js';
import { type JobQueueKind, jobNames, queueNames } from '../queues/names.js';
import {
  InvalidPayloadError,
  type JobName,
  jobPayloadSchemas,
  type PerksJob,
  parsePayload,
} from '../queues/payloads.js';
import { maxStalledCount } from '../queues/queues.js';
import { processReconciliation } from '../reconciliation/fan-out.js';
import { countFailedForGood, processReconcileTick } from '../reconciliation/index.js';
import type { RedisClient } from '../redis/connection.js';
import type { JobContext } from './context.js';
import { processEnrollment } from './enroll.js';
import { BackToWait, failureReason, steerFailure } from './failures.js';
import { processPruneEvents } from './prune-events.js';
import { processRewardSync } from './sync-rewards.js';
import { processRewardSyncBatch } from './sync-rewards-batch.js';

export type RunningWorker = ReturnType<typeof startWorker>;

/** The cancellation reason of the jobs still active when the shutdown's grace period ends. */
const shuttingDown = 'worker shutting down';

// queue.rateLimit (on 429s) needs a limiter: without PERKS_RATE_LIMIT_PER_SECOND, one too high
// to ever bind.
const unboundedRate = 1_000_000;

/** `telemetry`: OpenTelemetry for BullMQ (bullmq-otel), a span per job attempt. Default: none. */
export function startWorker(
  ctx: JobContext,
  connection: RedisClient,
  prefix: string,
  config: WorkerConfig,
  options: { telemetry?: Telemetry } = {},
) {
  const common: Omit<WorkerOptions, 'concurrency'> = {
    connection,
    prefix,
    limiter: { max: config.rateLimitPerSecond ?? unboundedRate, duration: 1000 },
    // A dead replica's jobs return to the queue after about one lock duration.
    lockDuration: config.jobLockMs,
    stalledInterval: config.jobLockMs,
    maxStalledCount,
    ...(options.telemetry ? { telemetry: options.telemetry } : {}),
  };
  // The one place a job's name picks its processor and its payload type.
  const processors: { [N in JobName]: (job: PerksJob<N>, signal?: AbortSignal) => unknown } = {
    [jobNames.enroll]: (job, signal) => processEnrollment(job, ctx, signal),
    [jobNames.syncRewards]: (job, signal) => processRewardSync(job, ctx, signal),
    [jobNames.syncRewardsBatch]: (job, signal) => processRewardSyncBatch(job, ctx, signal),
    [jobNames.reconcile]: (job, signal) => processReconciliation(job, ctx, signal),
    // They use nothing of their payload, which is checked all the same.
    [jobNames.reconcileTick]: (job) => {
      parsePayload(jobPayloadSchemas[jobNames.reconcileTick], job.data, 'reconcile tick');
      return processReconcileTick(ctx);
    },
    [jobNames.pruneEvents]: (job, signal) => {
      parsePayload(jobPayloadSchemas[jobNames.pruneEvents], job.data, 'prune events');
      return processPruneEvents(ctx, signal);
    },
  };
  // By the job's name. Another name runs as `fallback`, whose payload check then names what is
  // wrong (jobs of older producers); with none, it fails: the reconciliation's payload has a
  // default for every field, and an unknown job would fan out beside the deduplicated one.
  // Attempts in this process, their failure steered or not (closeWorkers reads it).
  let running = 0;
  const start = (
    queue: JobQueueKind,
    concurrency: number,
    names: JobName[],
    fallback?: JobName,
  ) => {
    const attempt = steered(ctx, async (job, _token, signal) => {
      const name = names.find((known) => known === job.name) ?? fallback;
      if (!name) {
        const shown = JSON.stringify(String(job.name).slice(0, 100));
        throw new InvalidPayloadError(`unknown job name ${shown} on the ${queue} queue`);
      }
      return (processors[name] as (job: Job, signal?: AbortSignal) => unknown)(job, signal);
    });
    // Three parameters declared: BullMQ passes the abort signal only to a processor whose
    // `length` is 3 or more, and a rest parameter's is 0 (the shutdown's cancel would reach none).
    const processor: Processor = async (job, token, signal) => {
      running += 1;
      try {
        return await attempt(job, token, signal);
      } finally {
        running -= 1;
      }
    };
    return watched(new Worker(queueNames[queue], processor, { ...common, concurrency }), ctx);
  };
  const { enroll, syncRewards, syncRewardsBatch, reconcile, reconcileTick, pruneEvents } = jobNames;
  const workers: Record<JobQueueKind, Worker> = {
    enrollment: start('enrollment', config.enrollConcurrency, [enroll], enroll),
    rewardSync: start(
      'rewardSync',
      config.syncConcurrency,
      [syncRewards, syncRewardsBatch],
      syncRewards,
    ),
    // 3: the cron tick (deduplicated) and the pruning must be able to run while a
    // reconciliation runs. Housekeeping goes here: this queue is never paused by the API.
    reconciliation: start('reconciliation', 3, [reconcile, reconcileTick, pruneEvents]),
  };
  /** Stops taking jobs, waits up to `timeoutMs` for active ones, then cancels what is left. */
  const close = (timeoutMs: number) =>
    closeWorkers(Object.values(workers), timeoutMs, () => running);
  return { workers, close };
}

// Times every attempt and steers its error (failures.ts). One sent back to wait gets no BullMQ
// event: it is logged here.
function steered(ctx: JobContext, processor: Processor): Processor {
  return async (job, token, signal) => {
    const started = performance.now();
    const seconds = () => (performance.now() - started) / 1000;
    try {
      const result: unknown = await processor(job, token, signal);
      ctx.metrics.jobAttempt(job.queueName, 'completed', seconds());
      return result;
    } catch (thrown) {
      // An aborted job rejects with the abort reason, a string: keep failedReason readable.
      const error =
        signal?.reason === shuttingDown
          ? new BackToWait(shuttingDown)
          : await steerFailure(thrown, ctx).catch((steered: unknown) =>
              steered instanceof Error ? steered : new Error(String(steered)),
            );
      const reason = failureReason(error);
      ctx.metrics.jobAttempt(job.queueName, reason, seconds());
      if (backToWait.includes(reason)) {
        const why = error instanceof BackToWait ? error.why : 'rate limited';
        const durationMs = Math.round(seconds() * 1000);
        const fields = { ...attemptOf(job), attempt: job.attemptsMade + 1, durationMs };
        ctx.logger.info(fields, `job paused (${why}); back to waiting`);
      }
      throw error;
    }
  };
}

/** A worker's metrics and log lines: one per job outcome, one per outage of its Redis. */
function watched(worker: Worker, ctx: JobContext): Worker {
  worker.on('completed', (job: Job, result: unknown) => {
    ctx.metrics.jobCompleted(job.queueName);
    ctx.logger.info({ ...attemptOf(job, result), result }, 'job completed');
  });
  worker.on('failed', (job: Job | undefined, error: Error) => {
    if (!job) return;
    // finishedOn is set only once it failed for good (no attempt left, or unrecoverable).
    const final = job.finishedOn !== undefined;
    ctx.metrics.jobFailed(job.queueName, failureReason(error), final);
    ctx.logger.warn(
      { ...attemptOf(job), err: { name: error.name, message: error.message }, final },
      final ? 'job failed' : 'job attempt failed; will retry',
    );
    if (final) void countFailedForGood(job, ctx);
  });
  // Never fatal (Redis away, a lock lost); repeated at every reconnect, so one line per outage.
  const outage = outageLogger(ctx.logger, 'worker error', 'error', { queue: worker.name });
  worker.on('error', outage.error);
  worker.on('resumed', outage.recovered);
  worker.on('active', outage.recovered);
  return worker;
}

/** How often a close waiting on active jobs looks whether any is left. */
const idleCheckMs = 500;

async function closeWorkers(
  all: Worker[],
  timeoutMs: number,
  running: () => number,
): Promise<{ timedOut: boolean }> {
  const closing = Promise.all(all.map((w) => w.close()));
  const ends = Date.now() + timeoutMs;
  let idleChecks = 0;
  for (;;) {
    const left = ends - Date.now();
    if (await within(Math.max(0, Math.min(left, idleCheckMs)), closing)) {
      await closing; // a close that failed still throws
      return { timedOut: false };
    }
    // No attempt ran for two checks (a finished one's outcome had time to reach Redis): a close
    // still waiting waits on Redis (away), with no work left to finish. An outcome Redis never
    // took leaves that job to run again elsewhere once its lock expires (at least once).
    idleChecks = running() === 0 ? idleChecks + 1 : 0;
    if (idleChecks === 2) return { timedOut: false };
    if (left <= idleCheckMs) break;
  }
  // Those jobs go back to wait (steered), for another replica, with no attempt spent.
  for (const w of all) w.cancelAllJobs(shuttingDown);
  const closed = await within(5000, closing);
  if (!closed) await within(5000, Promise.all(all.map((w) => w.close(true))));
  return { timedOut: true };
}

/**
 * A job outcome's log fields: the consumer (or consumers) it is about, from its payload or an
 * enrollment's result; the duration is of this attempt, up to now if it is retried.
 */
function attemptOf(job: Job, result?: unknown) {
  type Subject = { consumerId?: string; consumerIds?: string[]; [field: string]: unknown };
  const schema: z.ZodType<Subject> | undefined = jobPayloadSchemas[job.name as JobName];
  const payload = schema?.safeParse(job.data).data;
  const consumerId = payload?.consumerId ?? (result as Subject | undefined)?.consumerId;
  const end = job.finishedOn ?? Date.now();
  return {
    queue: job.queueName,
    jobId: job.id,
    ...(payload?.consumerIds ? { consumerIds: payload.consumerIds } : { consumerId }),
    attempt: job.attemptsMade,
    durationMs: job.processedOn ? end - job.processedOn : undefined,
  };
}
