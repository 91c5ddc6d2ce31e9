/** The spec's "per-token request limits", in fixed one-second windows. */
export class RateLimiter {
  private windows = new Map<string, { second: number; count: number }>();

  constructor(private perSecond: number | undefined) {}

  get limit(): number | undefined {
    return this.perSecond;
  }

  set(perSecond: number | undefined): void {
    this.perSecond = perSecond;
    this.windows.clear();
  }

  /** `key`: the Authorization header. The seconds to wait when over. */
  hit(key: string): number | undefined {
    if (this.perSecond === undefined) return undefined;
    const second = Math.floor(Date.now() / 1000);
    let window = this.windows.get(key);
    if (!window || window.second !== second) {
      // A token per request must not grow the map.
      if (this.windows.size > 10_000) this.windows.clear();
      window = { second, count: 0 };
      this.windows.set(key, window);
    }
    window.count++;
    return window.count > this.perSecond ? 1 : undefined;
  }
}
