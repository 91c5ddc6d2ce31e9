/**
 * How an error thrown inside a processor steers BullMQ:
 * - the payload or our request is wrong, or the API refuses us for good (400, 403):
 *   UnrecoverableError, failed at once, no retry storm;
 * - the API throttles us (429): the whole queue pauses for Retry-After (`queue.rateLimit`)
 *   and the job goes back to wait without spending an attempt (RateLimitError);
 * - anything else (5xx after the client's own retries, timeouts, Redis or Postgres away):
 *   rethrown, so BullMQ retries it with exponential backoff.
 */
import { type Queue, RateLimitError, UnrecoverableError } from 'bullmq';
import { AuthError, InvalidInputError, ThrottledError, ValidationError } from '../perks/errors.js';
import { ConsumerIdKeyMissingError } from '../queues/consumer-id.js';
import { InvalidPayloadError } from '../queues/payloads.js';

/** Errors that retrying cannot fix. */
export function isPermanent(error: unknown): boolean {
  return (
    error instanceof InvalidPayloadError ||
    error instanceof ConsumerIdKeyMissingError ||
    error instanceof InvalidInputError ||
    error instanceof ValidationError ||
    (error instanceof AuthError && error.status === 403)
  );
}

export async function steerFailure(error: unknown, queue: Queue): Promise<never> {
  if (error instanceof ThrottledError) {
    await queue.rateLimit(error.retryAfterMs);
    throw new RateLimitError();
  }
  if (isPermanent(error)) {
    throw new UnrecoverableError((error as Error).message);
  }
  throw error;
}
