/**
 * The running worker: one BullMQ Worker per queue, sharing one JobContext. Many replicas run
 * this side by side; BullMQ hands each job to exactly one of them and hands the jobs of a
 * replica that died to another (stalled-job recovery).
 */
import {
  type Job,
  type Processor,
  RateLimitError,
  type Telemetry,
  UnrecoverableError,
  Worker,
  type WorkerOptions,
} from 'bullmq';
import type { WorkerConfig } from '../config.js';
import type { FailureReason } from '../ops/metrics.js';
import { oncePerOutage } from '../ops/outage.js';
import { within } from '../ops/timeouts.js';
import type { RedisClient } from '../queues/connection.js';
import { jobNames, type QueueKind, queueNames } from '../queues/names.js';
import type { JobName, PerksJob } from '../queues/payloads.js';
import { countOutcome } from '../queues/reconciliation-tally.js';
import type { JobContext } from './context.js';
import { processEnrollment } from './enroll.js';
import { BackToWait } from './failures.js';
import { processReconcileTick, processReconciliation } from './reconcile.js';
import { processRewardSync } from './sync-rewards.js';
import { processRewardSyncBatch } from './sync-rewards-batch.js';

export interface RunningWorker {
  workers: Record<QueueKind, Worker>;
  /** Stops taking jobs, waits up to `timeoutMs` for active ones, then cancels what is left. */
  close(timeoutMs: number): Promise<{ timedOut: boolean }>;
}

export interface StartWorkerOptions {
  /** OpenTelemetry for BullMQ (bullmq-otel): a span per job attempt. Default: none. */
  telemetry?: Telemetry;
}

/**
 * BullMQ's queue.rateLimit (used on 429s) only works with a limiter configured, so there is
 * always one; without PERKS_RATE_LIMIT_PER_SECOND it is too high to ever bind.
 */
const unboundedRate = 1_000_000;

export function startWorker(
  ctx: JobContext,
  connection: RedisClient,
  prefix: string,
  config: Pick<
    WorkerConfig,
    'enrollConcurrency' | 'syncConcurrency' | 'rateLimitPerSecond' | 'jobLockMs'
  >,
  options: StartWorkerOptions = {},
): RunningWorker {
  const limiter = { max: config.rateLimitPerSecond ?? unboundedRate, duration: 1000 };
  const common: Omit<WorkerOptions, 'concurrency'> = {
    connection,
    prefix,
    limiter,
    // A dead replica's jobs return to the queue after about one lock duration.
    lockDuration: config.jobLockMs,
    stalledInterval: config.jobLockMs,
    ...(options.telemetry ? { telemetry: options.telemetry } : {}),
  };

  const logOutcome = (worker: Worker) => {
    worker.on('completed', (job: Job, result: unknown) => {
      ctx.metrics.jobCompleted(job.queueName);
      ctx.logger.info(
        {
          queue: job.queueName,
          jobId: job.id,
          ...subjectOf(job, result),
          attempt: job.attemptsMade,
          durationMs: durationOf(job),
          result,
        },
        'job completed',
      );
    });
    worker.on('failed', (job: Job | undefined, error: Error) => {
      if (!job) return;
      // finishedOn is set only when the job has failed for good (no attempt left, or unrecoverable).
      const final = job.finishedOn !== undefined;
      ctx.metrics.jobFailed(job.queueName, failureReason(error), final);
      ctx.logger.warn(
        {
          queue: job.queueName,
          jobId: job.id,
          ...subjectOf(job),
          attempt: job.attemptsMade,
          durationMs: durationOf(job),
          err: { name: error.name, message: error.message },
          final,
        },
        final ? 'job failed' : 'job attempt failed; will retry',
      );
      if (final) void countFailedForGood(job, ctx);
    });
    // A worker 'error' (Redis away, a lock lost) must never crash the process; while Redis is
    // away it repeats at every reconnect attempt, so one line per outage.
    const outage = oncePerOutage((error) =>
      ctx.logger.error({ queue: worker.name, err: { message: error.message } }, 'worker error'),
    );
    worker.on('error', outage.error);
    worker.on('resumed', outage.recovered);
    worker.on('active', outage.recovered);
    return worker;
  };

  /** Times every attempt. One sent back to wait gets no BullMQ event: it is logged here. */
  const measured =
    (processor: Processor): Processor =>
    async (job, token, signal) => {
      const started = performance.now();
      const seconds = () => (performance.now() - started) / 1000;
      try {
        const result: unknown = await processor(job, token, signal);
        ctx.metrics.jobAttempt(job.queueName, 'completed', seconds());
        return result;
      } catch (thrown) {
        // An aborted job rejects with the abort reason, a string: keep failedReason readable.
        const error = thrown instanceof Error ? thrown : new Error(String(thrown));
        const reason = failureReason(error);
        ctx.metrics.jobAttempt(job.queueName, reason, seconds());
        if (reason === 'rate_limited') {
          ctx.logger.info(
            {
              queue: job.queueName,
              jobId: job.id,
              ...subjectOf(job),
              attempt: job.attemptsMade + 1,
              durationMs: Math.round(seconds() * 1000),
            },
            `job paused (${error instanceof BackToWait ? error.why : 'rate limited'}); back to waiting`,
          );
        }
        throw error;
      }
    };

  // The one place a job's name picks its processor and its payload type.
  const processors: { [N in JobName]: (job: PerksJob<N>, signal?: AbortSignal) => unknown } = {
    [jobNames.enroll]: (job, signal) => processEnrollment(job, ctx, signal),
    [jobNames.syncRewards]: (job, signal) => processRewardSync(job, ctx, signal),
    [jobNames.syncRewardsBatch]: (job, signal) => processRewardSyncBatch(job, ctx, signal),
    [jobNames.reconcile]: (job, signal) => processReconciliation(job, ctx, signal),
    [jobNames.reconcileTick]: () => processReconcileTick(ctx),
  };
  /**
   * A queue's processor: by the job's name, and a name of another queue's job or none we
   * know runs as the queue's main job, whose payload check then names what is wrong.
   */
  const processorOf = (main: JobName, names: readonly JobName[]): Processor =>
    measured(async (job, _token, signal) => {
      const name = names.find((known) => known === job.name) ?? main;
      const processor = processors[name] as (job: Job, signal?: AbortSignal) => unknown;
      return processor(job, signal);
    });

  const workers: Record<QueueKind, Worker> = {
    enrollment: logOutcome(
      new Worker(queueNames.enrollment, processorOf(jobNames.enroll, []), {
        ...common,
        concurrency: config.enrollConcurrency,
      }),
    ),
    rewardSync: logOutcome(
      new Worker(
        queueNames.rewardSync,
        processorOf(jobNames.syncRewards, [jobNames.syncRewardsBatch]),
        {
          ...common,
          concurrency: config.syncConcurrency,
        },
      ),
    ),
    // 2: the cron tick must be able to run (and be deduplicated) while a reconciliation runs.
    reconciliation: logOutcome(
      new Worker(
        queueNames.reconciliation,
        processorOf(jobNames.reconcile, [jobNames.reconcileTick]),
        { ...common, concurrency: 2 },
      ),
    ),
  };

  return {
    workers,
    async close(timeoutMs) {
      const all = Object.values(workers);
      const closing = Promise.all(all.map((w) => w.close()));
      const timedOut = !(await within(timeoutMs, closing));
      if (!timedOut) await closing; // a close that failed still throws
      if (timedOut) {
        // Abort what is still running; those jobs fail this attempt and are retried later
        // (or, if Redis is gone too, are taken up by another replica once their lock expires).
        for (const w of all) w.cancelAllJobs('worker shutting down');
        const closed = await within(5000, closing);
        if (!closed) await within(5000, Promise.all(all.map((w) => w.close(true))));
      }
      return { timedOut };
    },
  };
}

/** A sync of a reconciliation that failed for good: its consumers count as failed there. */
async function countFailedForGood(job: Job, ctx: JobContext): Promise<void> {
  const data: unknown = job.data;
  if (typeof data !== 'object' || data === null) return;
  const { reconciliation, consumerIds } = data as {
    reconciliation?: unknown;
    consumerIds?: unknown;
  };
  if (typeof reconciliation !== 'string') return;
  const consumers = Array.isArray(consumerIds) ? consumerIds.length : 1;
  try {
    await countOutcome(ctx.tallies, reconciliation, 'failed', consumers);
  } catch (error) {
    ctx.logger.warn(
      { jobId: job.id, reconciliation, err: { message: (error as Error).message } },
      'could not count a failed sync in its reconciliation',
    );
  }
}

/** From the start of this attempt to its end (or now, for an attempt that will be retried). */
function durationOf(job: Job): number | undefined {
  return job.processedOn ? (job.finishedOn ?? Date.now()) - job.processedOn : undefined;
}

function failureReason(error: unknown): FailureReason {
  if (error instanceof RateLimitError) return 'rate_limited';
  if (error instanceof UnrecoverableError) return 'unrecoverable';
  return 'error';
}

/**
 * The consumer a job is about, for the log line: from its payload, or an enrollment's result;
 * the consumers of a job of several.
 */
function subjectOf(job: Job, result?: unknown): { consumerId?: string; consumerIds?: unknown } {
  for (const source of [job.data, result]) {
    if (typeof source === 'object' && source !== null && 'consumerId' in source) {
      const { consumerId } = source as { consumerId: unknown };
      if (typeof consumerId === 'string') return { consumerId };
    }
  }
  const data: unknown = job.data;
  if (typeof data === 'object' && data !== null && 'consumerIds' in data) {
    return { consumerIds: (data as { consumerIds: unknown }).consumerIds };
  }
  return {};
}
