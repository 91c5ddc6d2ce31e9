import type { Logger } from './logger.js';

/**
 * Logs the first error of an outage, then stays quiet until `recovered()` is called or
 * `quietMs` has passed (an idle worker may see no sign of recovery for a long time, and a new
 * kind of error must not stay hidden behind the first). A thrown non-Error is wrapped in one.
 */
export function oncePerOutage(log: (error: Error) => void, quietMs = 60_000) {
  let loggedAt: number | undefined;
  return {
    error(error: unknown) {
      const now = Date.now();
      if (loggedAt !== undefined && now - loggedAt < quietMs) return;
      loggedAt = now;
      log(error instanceof Error ? error : new Error(String(error)));
    },
    recovered() {
      loggedAt = undefined;
    },
  };
}

export type Outage = ReturnType<typeof oncePerOutage>;

/** oncePerOutage logging `msg` (with `err.message`) at `level`. */
export function outageLogger(
  logger: Logger,
  msg: string,
  level: 'warn' | 'error' = 'warn',
  fields: object = {},
) {
  return oncePerOutage((error) =>
    logger[level]({ ...fields, err: { message: error.message } }, msg),
  );
}
