/**
 * A per-token request rate limit, as the spec's throttling ("per-token request limits").
 * Fixed one-second windows: simple, cheap, and enough to make a client meet 429s.
 */
export class RateLimiter {
  private windows = new Map<string, { second: number; count: number }>();

  constructor(private perSecond: number | undefined) {}

  /** Requests per second per token, or undefined when there is no limit. */
  get limit(): number | undefined {
    return this.perSecond;
  }

  set(perSecond: number | undefined): void {
    this.perSecond = perSecond;
    this.windows.clear();
  }

  /**
   * Counts one request for `key` (the Authorization header value, never stored elsewhere).
   * Returns the seconds to wait when over the limit, else undefined.
   */
  hit(key: string): number | undefined {
    if (this.perSecond === undefined) return undefined;
    const second = Math.floor(Date.now() / 1000);
    let window = this.windows.get(key);
    if (!window || window.second !== second) {
      // Forget old windows now and then so a token per request cannot grow the map.
      if (this.windows.size > 10_000) this.windows.clear();
      window = { second, count: 0 };
      this.windows.set(key, window);
    }
    window.count++;
    return window.count > this.perSecond ? 1 : undefined;
  }
}
