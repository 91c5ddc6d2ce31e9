/**
 * Slows down repeated failed logins: each failure from an address doubles the wait of its next
 * refusal (250 ms, 500 ms, ... up to 10 s), so guessing a dashboard password costs 10 s a guess
 * after a handful. A success, or 15 minutes without a failure, forgets the address. The table
 * is bounded: at its limit the oldest entry goes.
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
