/**
 * Resolves on the first SIGTERM or SIGINT. A second signal while shutting down exits at once
 * (the operator insists); jobs still active are then recovered by another replica.
 */
export function shutdownSignal(
  onSecond: () => void = () => process.exit(130),
): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    let received = false;
    const handler = (signal: NodeJS.Signals) => {
      if (received) return onSecond();
      received = true;
      resolve(signal);
    };
    process.on('SIGTERM', handler);
    process.on('SIGINT', handler);
  });
}

/**
 * Waits for `work` at most `ms`: a close that needs a server which is gone (Redis down at
 * shutdown) must not hold the process forever. Resolves false when time ran out.
 */
export async function within(ms: number, work: Promise<unknown>): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const finished = await Promise.race([
    work.then(
      () => true,
      () => true,
    ),
    new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(false), ms);
    }),
  ]);
  clearTimeout(timer);
  return finished;
}

/** Logs the first error of an outage, then stays quiet until `recovered()` is called. */
export function oncePerOutage(log: (error: Error) => void): {
  error: (error: Error) => void;
  recovered: () => void;
} {
  let down = false;
  return {
    error(error) {
      if (down) return;
      down = true;
      log(error);
    },
    recovered() {
      down = false;
    },
  };
}
