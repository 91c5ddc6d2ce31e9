/**
 * Access tokens, refreshed before they expire. Concurrent callers share one refresh; with a
 * lock-capable cache (Redis), replicas share one mint. A failing cache, or one silent for 2 s
 * (Redis away, its commands queued until it is back), degrades to minting locally: tokens are
 * cheap, a stalled sync is not. Caches never log the token value.
 */
import { setTimeout } from 'node:timers/promises';
import { withTimeout } from '../ops/timeouts.js';
import type { PerksClientOptions } from './client.js';

/** Epoch ms: `expiresAt` when the API stops accepting it, `refreshAt` when to mint the next. */
export interface CachedToken {
  accessToken: string;
  expiresAt: number;
  refreshAt: number;
}

export type TokenLock = { release(): Promise<void> };

export interface TokenCache {
  get(): Promise<CachedToken | undefined>;
  /** Stores the token until its `expiresAt`; `now` is the client's clock. */
  set(token: CachedToken, now: number): Promise<void>;
  /** Drops the token, but only if it is still `accessToken`. */
  invalidate(accessToken: string): Promise<void>;
  /** The mint lock, or undefined while another holds it (the caller then polls `get()`). */
  lock?(ttlMs: number): Promise<TokenLock | undefined>;
}

type TokenProviderOptions = Pick<PerksClientOptions, 'tokenCache' | 'logger' | 'hooks'> & {
  mint: () => Promise<{ accessToken: string; lifetimeMs: number }>;
  now: () => number;
};

/** Refresh ahead of expiry by 10% of the lifetime or 60 s, whichever is smaller. */
export function refreshMarginMs(lifetimeMs: number): number {
  return Math.min(lifetimeMs * 0.1, 60_000);
}

/** A token about to expire is not handed out: the request could arrive after its expiry. */
const MIN_REMAINING_MS = 1_000;
/** After a failed refresh, the held token serves this long before the next try. */
const REFRESH_RETRY_MS = 5_000;
/** A mint lock is held at most this long; a replica waiting on another's mint polls this often. */
const LOCK_TTL_MS = 15_000;
const LOCK_POLL_MS = 50;
/** A cache operation answers within this, or it is taken as failed. */
const CACHE_OP_TIMEOUT_MS = 2_000;

export class TokenProvider {
  #memo: CachedToken | undefined;
  #inflight: Promise<CachedToken> | undefined;
  /** The last token a 401 refused: never handed out again, whoever still holds it. */
  #refused: string | undefined;

  constructor(private readonly options: TokenProviderOptions) {}

  /** A token valid now. The caller's signal stops its wait, not the shared refresh. */
  async accessToken(signal: AbortSignal): Promise<string> {
    if (this.#isFresh(this.#memo)) return this.#memo.accessToken;
    // A lookup that began before a 401 may bring back the token it refused: once more.
    for (let lookup = 1; ; lookup++) {
      this.#inflight ??= this.#findOrMint()
        .catch((error: unknown) => this.#keepHeld(error))
        .then((token) => {
          if (token.accessToken !== this.#refused) this.#memo = token;
          return token;
        })
        .finally(() => {
          this.#inflight = undefined;
        });
      const token = await abortable(this.#inflight, signal);
      if (token.accessToken !== this.#refused || lookup > 1) return token.accessToken;
    }
  }

  /** Mints a token now, whatever the cache holds, and keeps it for the next calls. */
  async mint(): Promise<void> {
    this.#memo = await this.#mintAndStore();
  }

  /** After a 401: forget this token here and in the shared cache. */
  async invalidate(accessToken: string): Promise<void> {
    this.#refused = accessToken;
    if (this.#memo?.accessToken === accessToken) this.#memo = undefined;
    await this.#cacheOp('invalidate', async () => this.options.tokenCache?.invalidate(accessToken));
  }

  /**
   * A refresh ahead of expiry failed (the token endpoint down, a client being rotated): the held
   * token still works, so calls go on with it, and the refresh is tried again a few seconds
   * later, not at every call. Past the token's expiry the failure is the caller's.
   */
  #keepHeld(error: unknown): CachedToken {
    const held = this.#memo;
    if (!this.#isUsable(held)) throw error;
    const retryAt = this.options.now() + REFRESH_RETRY_MS;
    const message = error instanceof Error ? error.message : String(error);
    this.options.logger?.warn(
      { err: { message }, expiresInMs: held.expiresAt - this.options.now() },
      'perks: token refresh failed; the current token is used until it expires',
    );
    return { ...held, refreshAt: Math.min(retryAt, held.expiresAt - MIN_REMAINING_MS) };
  }

  /** Before its refresh time (and usable: a short lifetime's margin may be under a second). */
  #isFresh(token: CachedToken | undefined): token is CachedToken {
    return this.#isUsable(token) && this.options.now() < token.refreshAt;
  }

  #isUsable(token: CachedToken | undefined): token is CachedToken {
    return (
      token !== undefined &&
      token.accessToken !== this.#refused &&
      this.options.now() < token.expiresAt - MIN_REMAINING_MS
    );
  }

  async #findOrMint(): Promise<CachedToken> {
    const { tokenCache: cache } = this.options;
    const cached = await this.#cacheOp('get', async () => cache?.get());
    if (this.#isFresh(cached)) return cached;
    if (!cache?.lock) return this.#mintAndStore();

    const giveUpAt = performance.now() + LOCK_TTL_MS;
    for (;;) {
      const lock = await this.#cacheOp('lock', async () => cache.lock?.(LOCK_TTL_MS), null);
      if (lock === null) return this.#mintAndStore(); // the cache is down: mint locally
      if (lock) {
        try {
          // Another replica may have stored a token between our get and our lock.
          const again = await this.#cacheOp('get', () => cache.get());
          if (this.#isFresh(again)) return again;
          return await this.#mintAndStore();
        } finally {
          await this.#cacheOp('release', () => lock.release());
        }
      }
      // Someone else is minting: the old token is accepted until it expires.
      if (this.#isUsable(cached)) return cached;
      // The holder may have died: its lock expires after LOCK_TTL_MS, then we mint ourselves.
      if (performance.now() >= giveUpAt) return this.#mintAndStore();
      await setTimeout(LOCK_POLL_MS);
      const polled = await this.#cacheOp('get', () => cache.get());
      if (this.#isUsable(polled)) return polled;
    }
  }

  async #mintAndStore(): Promise<CachedToken> {
    const { now, mint, tokenCache: cache } = this.options;
    const requestedAt = now();
    const minted = await mint();
    // Lifetimes count from the request, not the response: never later than the server's.
    const expiresAt = requestedAt + minted.lifetimeMs;
    const refreshAt = expiresAt - refreshMarginMs(minted.lifetimeMs);
    const token: CachedToken = { accessToken: minted.accessToken, expiresAt, refreshAt };
    this.options.hooks?.onTokenMinted?.();
    this.options.logger?.info({ expiresInMs: minted.lifetimeMs }, 'perks: minted an access token');
    await this.#cacheOp('set', async () => cache?.set(token, now()));
    return token;
  }

  /** Runs a cache operation; a failure is logged and answered with `orElse`. */
  async #cacheOp<T, F = undefined>(name: string, op: () => Promise<T>, orElse?: F): Promise<T | F> {
    try {
      return await withTimeout(op(), CACHE_OP_TIMEOUT_MS);
    } catch (error) {
      this.options.logger?.warn(
        { op: name, err: error instanceof Error ? error.message : String(error) },
        'perks: token cache unavailable, continuing without it',
      );
      return orElse as F;
    }
  }
}

/** Resolves like `promise`, or rejects with the signal's reason once it aborts. */
function abortable<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}
