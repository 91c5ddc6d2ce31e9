import type { Logger } from './logger.js';

/**
 * Logs the first error of an outage, then nothing until `recovered()` or `quietMs` (an idle
 * worker may see no recovery for long, and a new kind of error must not hide behind the first).
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
