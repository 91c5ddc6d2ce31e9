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
