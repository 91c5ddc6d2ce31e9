/**
 * Slows down failed logins: each failure from an address doubles its next refusal's wait (250 ms
 * up to 10 s). A success, or 15 minutes without a failure, forgets it; at the table's limit the
 * oldest address goes.
 */
const firstDelayMs = 250;
const maxDelayMs = 10_000;
const forgetAfterMs = 15 * 60_000;
const maxAddresses = 10_000;

export class LoginThrottle {
  readonly #failures = new Map<string, { count: number; last: number }>();

  constructor(private readonly now: () => number = Date.now) {}

  /** Records a failure from `address` and returns how long to wait before refusing it. */
  failed(address: string): number {
    const now = this.now();
    const previous = this.#failures.get(address);
    const count = previous && now - previous.last < forgetAfterMs ? previous.count + 1 : 1;
    this.#failures.delete(address);
    if (this.#failures.size >= maxAddresses) {
      const oldest = this.#failures.keys().next().value;
      if (oldest !== undefined) this.#failures.delete(oldest);
    }
    this.#failures.set(address, { count, last: now });
    return Math.min(firstDelayMs * 2 ** (count - 1), maxDelayMs);
  }

  succeeded(address: string): void {
    this.#failures.delete(address);
  }
}
