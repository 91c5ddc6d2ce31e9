/**
 * What an error thrown in a processor makes BullMQ do (`steerFailure`, applied by the worker):
 * - our payload or request is wrong (400): failed at once;
 * - a 429, the token endpoint failing (whatever its status), or a token refused for its scope
 *   or program (403): not this consumer's fault. The API queues pause (a 429: both, for
 *   Retry-After; the credentials: as mint-outage.ts says), and the job goes back to wait
 *   without spending an attempt (BackToWait);
 * - PostgreSQL away (its connection refused, lost, timed out, and a ping failing too): back to
 *   wait too, this replica's workers paused until it answers (datastore-outage.ts);
 * - a job cancelled by its replica's shutdown (SHUTDOWN_TIMEOUT_MS) goes back to wait too: a
 *   rolling deploy must not use up a long job's attempts;
 * - anything else (5xx after the client's retries, timeouts, Redis away): retried.
 */
import { RateLimitError, UnrecoverableError } from 'bullmq';
import type { FailureReason } from '../ops/metrics.js';
import {
  AuthError,
  InvalidInputError,
  PerksError,
  ResponseShapeError,
  ThrottledError,
  TokenMintError,
  ValidationError,
} from '../perks/errors.js';
import { ConsumerIdKeyMissingError } from '../queues/consumer-id.js';
import { InvalidPayloadError } from '../queues/payloads.js';
import type { Queues } from '../queues/queues.js';
import { isDatabaseAway } from '../store/errors.js';
import type { JobContext } from './context.js';

/** Back to wait, no attempt spent, the queues paused already; `why` is for the log. */
export class BackToWait extends RateLimitError {
  constructor(
    readonly why:
      | 'throttled by the API'
      | 'token mint failing'
      | 'credentials refused (403)'
      | 'postgres unreachable'
      | 'worker shutting down',
  ) {
    super();
  }
}

/** Errors that retrying cannot fix. */
export function isPermanent(error: unknown): boolean {
  if (error instanceof TokenMintError) return false;
  return (
    error instanceof InvalidPayloadError ||
    error instanceof ConsumerIdKeyMissingError ||
    error instanceof InvalidInputError ||
    // An enrollment naming another consumer: a retry would POST again, get 409 and pass.
    (error instanceof ResponseShapeError && error.operation === 'enrollConsumer') ||
    error instanceof ValidationError
  );
}

/**
 * Pauses both API queues (every replica) for at least `ms`, never shortening a longer pause, and
 * for 1 s at least: BullMQ refuses a zero pause, and `Retry-After: 0` still means "slow down".
 * Never throws: a Redis error while pausing must not turn the pause into a spent attempt.
 */
export async function pauseApiQueues(
  queues: Pick<Queues, 'enrollment' | 'rewardSync'>,
  ms: number,
): Promise<void> {
  const pauseMs = Math.max(ms, 1000);
  await Promise.allSettled(
    [queues.enrollment, queues.rewardSync].map(async (queue) => {
      if ((await queue.getRateLimitTtl()) < pauseMs) await queue.rateLimit(pauseMs);
    }),
  );
}

/** An attempt's failure, for the metrics. */
export function failureReason(error: unknown): FailureReason {
  if (error instanceof BackToWait && error.why === 'worker shutting down') return 'shutdown';
  if (error instanceof BackToWait && error.why === 'postgres unreachable') {
    return 'postgres_unreachable';
  }
  if (error instanceof RateLimitError) return 'rate_limited';
  if (error instanceof UnrecoverableError) return 'unrecoverable';
  return 'error';
}

type Steering = Pick<JobContext, 'queues' | 'mintOutage' | 'datastoreOutage'>;

/**
 * A 429, a failing mint or PostgreSQL away: pauses the queues or workers it stops and says why.
 * Anything else: undefined.
 */
export async function pauseFor(
  error: unknown,
  ctx: Steering,
): Promise<BackToWait['why'] | undefined> {
  if (error instanceof ThrottledError) {
    await pauseApiQueues(ctx.queues, error.retryAfterMs);
    return 'throttled by the API';
  }
  if (error instanceof TokenMintError) {
    await ctx.mintOutage.failed(error);
    return 'token mint failing';
  }
  // An API's transport error carries the same codes (ETIMEDOUT, ECONNRESET): never the database.
  if (!(error instanceof PerksError) && isDatabaseAway(error)) {
    if (await ctx.datastoreOutage.met(error)) return 'postgres unreachable';
  }
  // A 403 is the credentials' scope or program, or this one resource's: the probe (a mint and
  // a GET of a made-up consumer) tells. Refused there too: the credentials' outage, as a
  // refused mint is (this replica's API workers pause). Else the job's own failure, retried
  // and then failed as any other: never back to wait, where it would loop for ever.
  if (error instanceof AuthError && error.status === 403) {
    return (await ctx.mintOutage.probe()) ? undefined : 'credentials refused (403)';
  }
  return undefined;
}

/**
 * Whether a failed job failed for good because retrying cannot help: steerFailure fails such a
 * job with an UnrecoverableError, whose stack the job keeps last in its `stacktrace`.
 */
export const failedPermanently = (stacktrace: readonly string[] | null | undefined): boolean =>
  /^UnrecoverableError\b/.test(stacktrace?.at(-1) ?? '');

export async function steerFailure(error: unknown, ctx: Steering): Promise<never> {
  const paused = await pauseFor(error, ctx);
  if (paused) throw new BackToWait(paused);
  if (isPermanent(error)) throw new UnrecoverableError((error as Error).message);
  throw error;
}
