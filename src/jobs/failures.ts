/**
 * How an error thrown inside a processor steers BullMQ:
 * - the payload or our request is wrong, or the API refuses us for good (400, 403):
 *   UnrecoverableError, failed at once, no retry storm;
 * - the API throttles us (429): both API queues pause for Retry-After (`queue.rateLimit`;
 *   the limit is per token, and both queues spend the same token's budget) and the job goes
 *   back to wait without spending an attempt (RateLimitError);
 * - the token endpoint fails, whatever its status: both API queues pause with backoff until a
 *   mint works (MintOutage), and the job goes back to wait without spending an attempt (a 400
 *   there says nothing about this consumer, and must not fail every job for good);
 * - anything else (5xx after the client's own retries, timeouts, Redis or Postgres away):
 *   rethrown, so BullMQ retries it with exponential backoff.
 */
import { RateLimitError, UnrecoverableError } from 'bullmq';
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

/**
 * Back to wait without spending an attempt: the queues are paused already. BullMQ knows it by
 * its message, RateLimitError's; `why` is for the log.
 */
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
 * Pauses both API queues (every replica) for at least `ms`, never shortening a longer pause
 * already set (a 429's Retry-After, or a failing mint's backoff). Never throws: a Redis error
 * while pausing must not turn the pause into a spent attempt.
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
