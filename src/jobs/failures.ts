/**
 * What an error thrown in a processor makes BullMQ do (`steerFailure`, applied by the worker):
 * - our payload or request is wrong, or the API refuses us for good (400, 403): failed at once
 *   (UnrecoverableError), no retry storm;
 * - a 429, or the token endpoint failing (whatever its status: it says nothing about this
 *   consumer): both API queues pause, for Retry-After or the mint's backoff (they spend one
 *   token's budget), and the job goes back to wait without spending an attempt (BackToWait);
 * - anything else (5xx after the client's retries, timeouts, Redis or Postgres away): retried
 *   by BullMQ with exponential backoff.
 */
import { RateLimitError, UnrecoverableError } from 'bullmq';
import type { FailureReason } from '../ops/metrics.js';
import {
  AuthError,
  InvalidInputError,
  ThrottledError,
  TokenMintError,
  ValidationError,
} from '../perks/errors.js';
import { ConsumerIdKeyMissingError } from '../queues/consumer-id.js';
import { InvalidPayloadError } from '../queues/payloads.js';
import type { Queues } from '../queues/queues.js';
import type { JobContext } from './context.js';

/** Back to wait, no attempt spent, the queues paused already; `why` is for the log. */
export class BackToWait extends RateLimitError {
  constructor(readonly why: 'throttled by the API' | 'token mint failing') {
    super();
  }
}

/** BullMQ refuses a zero or negative pause; `Retry-After: 0` still means "slow down". */
const minimumPauseMs = 1000;

/** Errors that retrying cannot fix. */
export function isPermanent(error: unknown): boolean {
  if (error instanceof TokenMintError) return false;
  return (
    error instanceof InvalidPayloadError ||
    error instanceof ConsumerIdKeyMissingError ||
    error instanceof InvalidInputError ||
    error instanceof ValidationError ||
    (error instanceof AuthError && error.status === 403)
  );
}

/**
 * Pauses both API queues (every replica) for at least `ms`, never shortening a longer pause.
 * Never throws: a Redis error while pausing must not turn the pause into a spent attempt.
 */
export async function pauseApiQueues(
  queues: Pick<Queues, 'enrollment' | 'rewardSync'>,
  ms: number,
): Promise<void> {
  await Promise.allSettled(
    [queues.enrollment, queues.rewardSync].map(async (queue) => {
      if ((await queue.getRateLimitTtl()) < ms) await queue.rateLimit(ms);
    }),
  );
}

/** Pauses both API queues for the 429's Retry-After; never throws. */
export async function pauseForThrottle(error: ThrottledError, queues: Queues): Promise<void> {
  await pauseApiQueues(queues, Math.max(error.retryAfterMs, minimumPauseMs));
}

/** An attempt's failure, for the metrics. */
export function failureReason(error: unknown): FailureReason {
  if (error instanceof RateLimitError) return 'rate_limited';
  if (error instanceof UnrecoverableError) return 'unrecoverable';
  return 'error';
}

export async function steerFailure(
  error: unknown,
  ctx: Pick<JobContext, 'queues' | 'mintOutage'>,
): Promise<never> {
  if (error instanceof ThrottledError) {
    await pauseForThrottle(error, ctx.queues);
    throw new BackToWait('throttled by the API');
  }
  if (error instanceof TokenMintError) {
    await ctx.mintOutage.failed(error);
    throw new BackToWait('token mint failing');
  }
  if (isPermanent(error)) {
    throw new UnrecoverableError((error as Error).message);
  }
  throw error;
}
