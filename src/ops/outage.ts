/**
 * Logs the first error of an outage, then stays quiet until `recovered()` is called or
 * `quietMs` has passed (an idle worker may see no sign of recovery for a long time, and a new
 * kind of error must not stay hidden behind the first).
 */
export function oncePerOutage(log: (error: Error) => void, quietMs = 60_000) {
  let loggedAt: number | undefined;
  return {
    error(error: Error) {
      const now = Date.now();
      if (loggedAt !== undefined && now - loggedAt < quietMs) return;
      loggedAt = now;
      log(error);
    },
    recovered() {
      loggedAt = undefined;
    },
  };
}
