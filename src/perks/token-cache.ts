/**
 * Where minted access tokens are kept. The default lives in memory (one process); a shared
 * implementation (Redis, src/redis/token-cache.ts) lets N replicas mint about one token an
 * hour instead of N. Implementations store the token value but must never log it.
 */

export interface CachedToken {
  accessToken: string;
  /** When the API stops accepting it (epoch ms). */
  expiresAt: number;
  /** When to mint the next one: before expiry, by min(10% of lifetime, 60 s) (epoch ms). */
  refreshAt: number;
}

/** Held while minting, so that only one replica mints at a time. */
export interface TokenLock {
  release(): Promise<void>;
}

export interface TokenCache {
  get(): Promise<CachedToken | undefined>;
  /** Stores the token until its `expiresAt`; `now` is the client's clock (epoch ms). */
  set(token: CachedToken, now: number): Promise<void>;
  /** Drops the token, but only if it is still `accessToken` (another may have replaced it). */
  invalidate(accessToken: string): Promise<void>;
  /**
   * Optional mint lock. Resolves to a held lock, or undefined when someone else holds it:
   * the caller then polls `get()` briefly for the token the holder is minting.
   */
  lock?(ttlMs: number): Promise<TokenLock | undefined>;
}

/** The default: a token shared by the clients of one process that are given the same cache. */
export class InMemoryTokenCache implements TokenCache {
  #token: CachedToken | undefined;
  #now: () => number;

  constructor(now: () => number = Date.now) {
    this.#now = now;
  }

  async get(): Promise<CachedToken | undefined> {
    if (this.#token && this.#now() >= this.#token.expiresAt) this.#token = undefined;
    return this.#token;
  }

  async set(token: CachedToken): Promise<void> {
    this.#token = token;
  }

  async invalidate(accessToken: string): Promise<void> {
    if (this.#token?.accessToken === accessToken) this.#token = undefined;
  }
}
