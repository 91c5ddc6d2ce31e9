/**
 * Requests in flight to the API, adapting (after TCP Vegas and Netflix's concurrency-limits):
 * while the smoothed round trip stays under 1.2 × the no-load one, one more request per round
 * trip (doubling until the first slowdown or overload); past 2 ×, one fewer. The band is wide: a
 * worker short of CPU slows its own samples too (they wait behind other work in its event loop),
 * and fewer requests out would not make it faster. An answer that says "too much" (429, 5xx, a
 * timeout) cuts the limit by a tenth, once per round trip. It never leaves [1, max].
 *
 * The round trip runs from the slot's grant to the body read. The no-load round trip is
 * re-measured every 10 s (as BBR does): for a few round trips half the limit is let out, so an
 * API that became slower for good is not taken for a queue.
 */

export type Outcome = 'ok' | 'overload' | 'ignore';

const probeEveryMs = 10_000;
/** Round trips a probe lasts: one to drain the requests out before it, then samples at half. */
const probeRoundTrips = 4;

export interface ConcurrencyLimitOptions {
  max: number;
  /** Default 16, at most `max`. */
  initial?: number;
  /** Milliseconds; default performance.now. */
  now?: () => number;
}

export class ConcurrencyLimit {
  readonly #max: number;
  readonly #now: () => number;
  #limit: number;
  #inFlight = 0;
  #peak = 0;
  readonly #waiting: Array<() => void> = [];
  #granted = 0;
  /** Slots granted up to this one saw the limit before the last cut: their overload is old news. */
  #lastCut = 0;
  #slowStart = true;
  #noLoadMs = Number.POSITIVE_INFINITY;
  #rttMs = Number.POSITIVE_INFINITY;
  #lastProbeAt: number;
  #probe: { until: number; after: number; minMs: number } | undefined;

  constructor(options: ConcurrencyLimitOptions) {
    this.#max = options.max;
    this.#limit = Math.min(options.max, options.initial ?? 16);
    this.#now = options.now ?? (() => performance.now());
    this.#lastProbeAt = this.#now();
  }

  /** Requests let out at once now: half the limit while the no-load round trip is probed. */
  get limit(): number {
    const limit = Math.floor(this.#limit);
    return this.#probe ? Math.max(1, Math.ceil(limit / 2)) : limit;
  }

  /** Requests in flight now, and the most there ever were. */
  get inFlight(): { now: number; peak: number } {
    return { now: this.#inFlight, peak: this.#peak };
  }

  /** Waits for a slot (FIFO); `done` gives it back with what the exchange said and took. */
  async acquire(signal?: AbortSignal): Promise<(outcome: Outcome, rttMs: number) => void> {
    if (this.#inFlight >= this.limit || this.#waiting.length > 0) {
      signal?.throwIfAborted();
      await new Promise<void>((resolve, reject) => {
        const grant = () => {
          signal?.removeEventListener('abort', abort);
          resolve();
        };
        const abort = () => {
          this.#waiting.splice(this.#waiting.indexOf(grant), 1);
          reject(signal?.reason);
        };
        signal?.addEventListener('abort', abort, { once: true });
        this.#waiting.push(grant);
      });
    } else {
      this.#inFlight += 1;
    }
    this.#peak = Math.max(this.#peak, this.#inFlight);
    this.#granted += 1;
    const slot = { number: this.#granted, inFlight: this.#inFlight };
    let released = false;
    return (outcome, rttMs) => {
      if (released) return;
      released = true;
      this.#update(outcome, rttMs, slot);
      this.#inFlight -= 1;
      this.#wake();
    };
  }

  #wake(): void {
    while (this.#inFlight < this.limit && this.#waiting.length > 0) {
      this.#inFlight += 1;
      this.#waiting.shift()?.();
    }
  }

  #update(outcome: Outcome, rttMs: number, slot: { number: number; inFlight: number }): void {
    if (outcome === 'ignore') return;
    if (outcome === 'overload') {
      this.#slowStart = false;
      if (slot.number <= this.#lastCut) return;
      this.#limit = Math.max(1, this.#limit * 0.9);
      this.#lastCut = this.#granted;
      return;
    }
    // Smoothed: one answer may wait behind a burst of others in the event loop.
    this.#rttMs = Number.isFinite(this.#rttMs) ? this.#rttMs + 0.1 * (rttMs - this.#rttMs) : rttMs;
    if (this.#probing(this.#rttMs, slot.number)) return;
    this.#noLoadMs = Math.min(this.#noLoadMs, this.#rttMs);
    const limit = this.#limit;
    // A sample taken with few requests out says nothing about a higher limit.
    if (slot.inFlight * 2 < limit) return;
    const slowing = this.#rttMs / this.#noLoadMs;
    let next = limit;
    if (slowing < 1.2) next = limit + (this.#slowStart ? 1 : 1 / limit);
    else {
      this.#slowStart = false;
      if (slowing > 2) next = limit - 1 / limit;
    }
    this.#limit = Math.min(this.#max, Math.max(1, next));
  }

  /** Starts, feeds or ends a probe; true while one runs (the limit holds meanwhile). */
  #probing(rttMs: number, slot: number): boolean {
    const now = this.#now();
    const probe = this.#probe;
    if (probe && now >= probe.until) {
      if (Number.isFinite(probe.minMs)) this.#noLoadMs = probe.minMs;
      this.#probe = undefined;
      this.#lastProbeAt = now;
    } else if (probe) {
      if (slot > probe.after) probe.minMs = Math.min(probe.minMs, rttMs);
      return true;
    } else if (now - this.#lastProbeAt >= probeEveryMs && Number.isFinite(this.#noLoadMs)) {
      const until = now + probeRoundTrips * Math.max(rttMs, this.#noLoadMs);
      this.#probe = { until, after: this.#granted, minMs: Number.POSITIVE_INFINITY };
      return true;
    }
    return false;
  }
}
