/**
 * Per-call abort signals. AbortSignal.any() is avoided on purpose: combined with a long-lived
 * source (the client's close signal, a worker's shutdown signal) it retains every derived
 * signal on Node versions we support (nodejs/node#55351). A linked signal detaches from its
 * sources when disposed.
 */

export interface LinkedSignal {
  signal: AbortSignal;
  /** True when the deadline, not a source, aborted it. */
  timedOut(): boolean;
  /** Detaches from the sources and clears the deadline. Call it when the work is done. */
  dispose(): void;
}

export function linkSignals(
  sources: ReadonlyArray<AbortSignal | undefined>,
  timeoutMs?: number,
): LinkedSignal {
  const controller = new AbortController();
  let timedOut = false;
  const attached: Array<[AbortSignal, () => void]> = [];
  for (const source of sources) {
    if (!source) continue;
    if (source.aborted) {
      controller.abort(source.reason);
      break;
    }
    const onAbort = () => controller.abort(source.reason);
    source.addEventListener('abort', onAbort, { once: true });
    attached.push([source, onAbort]);
  }
  const timer =
    timeoutMs === undefined || controller.signal.aborted
      ? undefined
      : setTimeout(() => {
          timedOut = true;
          controller.abort(new DOMException('The operation timed out', 'TimeoutError'));
        }, timeoutMs);
  return {
    signal: controller.signal,
    timedOut: () => timedOut,
    dispose: () => {
      clearTimeout(timer);
      for (const [source, onAbort] of attached) source.removeEventListener('abort', onAbort);
    },
  };
}
