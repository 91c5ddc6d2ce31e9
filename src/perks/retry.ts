/**
 * The retry policy of one API call: p-retry with exponential backoff and jitter, on retryable
 * upstream statuses (500/502/503/504) and transport failures only, bounded in attempts and in
 * total time, cancelled by the caller's AbortSignal even mid-wait.
 *
 * p-retry runs with a zero delay of its own: the wait happens in `shouldRetry`, so that the
 * delay actually slept is the one reported to `onRetry` and never outlives `maxRetryTimeMs`.
 */
import pRetry from 'p-retry';
import type { Logger } from 'pino';
import { isRetryable } from './errors.js';
import { sleep } from './sleep.js';

export interface RetryOptions {
  /** Attempts in all, the first included. Default 4. */
  attempts?: number;
  /** No retry starts after this much time since the first attempt. Default 30000. */
  maxRetryTimeMs?: number;
  /** Base of the exponential backoff. Default 200. */
  minDelayMs?: number;
  /** Cap of one backoff wait. Default 5000. */
  maxDelayMs?: number;
}

export const defaultRetry: Required<RetryOptions> = {
  attempts: 4,
  maxRetryTimeMs: 30_000,
  minDelayMs: 200,
  maxDelayMs: 5_000,
};

export interface RetryEvent {
  operation: string;
  /** The attempt that failed (1 = the first). */
  attempt: number;
  delayMs: number;
  reason: string;
}

/**
 * "Equal jitter": half of the exponential step is fixed, half random, so replicas that failed
 * together do not retry together, and no retry comes back immediately.
 */
export function backoffDelayMs(
  failedAttempt: number,
  retry: Pick<Required<RetryOptions>, 'minDelayMs' | 'maxDelayMs'>,
  random: () => number = Math.random,
): number {
  const step = Math.min(retry.maxDelayMs, retry.minDelayMs * 2 ** (failedAttempt - 1));
  return Math.round(step / 2 + random() * (step / 2));
}

export interface RetryContext {
  operation: string;
  retry: Required<RetryOptions>;
  signal?: AbortSignal | undefined;
  onRetry?: ((event: RetryEvent) => void) | undefined;
  logger?: Logger | undefined;
}

/** Runs `attempt` (given its number, 1 = first) under the policy. */
export function withRetry<T>(
  context: RetryContext,
  attempt: (attemptNumber: number) => Promise<T>,
): Promise<T> {
  const { operation, retry, signal } = context;
  const startedAt = performance.now();
  return pRetry(attempt, {
    retries: Math.max(0, retry.attempts - 1),
    maxRetryTime: retry.maxRetryTimeMs,
    minTimeout: 0,
    factor: 1,
    signal,
    shouldRetry: async ({ error, attemptNumber }) => {
      if (!isRetryable(error)) return false;
      const delayMs = backoffDelayMs(attemptNumber, retry);
      const remainingMs = retry.maxRetryTimeMs - (performance.now() - startedAt);
      // A retry that would start past the budget is not worth the wait.
      if (delayMs >= remainingMs) return false;
      const reason = error.message;
      context.onRetry?.({ operation, attempt: attemptNumber, delayMs, reason });
      context.logger?.warn(
        { operation, attempt: attemptNumber, delayMs, reason },
        'perks: retrying after a failure',
      );
      await sleep(delayMs, signal);
      return true;
    },
  });
}
