/** Resolves on the first SIGTERM or SIGINT; a second exits at once (another replica recovers). */
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
