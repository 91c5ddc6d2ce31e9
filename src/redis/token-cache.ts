/**
 * The Perks access token shared through Redis, so N replicas mint about one token an hour
 * instead of N. The token lives under `<prefix>:perks:token` with a PX expiry at the token's
 * own expiry; a `SET NX PX` lock lets one replica mint while the others poll the key. The
 * token value is stored, never logged.
 *
 * Keep one key per API client: two programs or environments sharing a prefix must pass
 * different `name`s (the client id is a good one; it is not a secret).
 */
import { z } from 'zod';
import type { CachedToken, TokenCache, TokenLock } from '../perks/tokens.js';
import type { RedisClient } from './connection.js';
import { acquireRedisLock } from './lock.js';

export interface RedisTokenCacheOptions {
  redis: RedisClient;
  /** Key prefix, e.g. the queue prefix `perks` (or `{perks}` on Redis Cluster). */
  prefix: string;
  /** Distinguishes API clients sharing a prefix. Default 'default'. */
  name?: string;
}

const storedSchema = z.object({
  accessToken: z.string().min(1),
  expiresAt: z.number(),
  refreshAt: z.number(),
});

// Deletes the key only if it still holds what we expect: a replica that saw a 401 must not
// drop the fresh token another replica has just stored, nor a lock it no longer owns.
const deleteIfTokenIs = `
local value = redis.call('GET', KEYS[1])
if not value then return 0 end
local ok, decoded = pcall(cjson.decode, value)
if ok and decoded.accessToken == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`;

export class RedisTokenCache implements TokenCache {
  readonly #redis: RedisClient;
  readonly #tokenKey: string;
  readonly #lockKey: string;

  constructor(options: RedisTokenCacheOptions) {
    this.#redis = options.redis;
    const base = `${options.prefix}:perks:token:${options.name ?? 'default'}`;
    this.#tokenKey = base;
    this.#lockKey = `${base}:lock`;
  }

  async get(): Promise<CachedToken | undefined> {
    const value = await this.#redis.get(this.#tokenKey);
    if (value === null) return undefined;
    try {
      const parsed = storedSchema.safeParse(JSON.parse(value));
      return parsed.success ? parsed.data : undefined;
    } catch {
      return undefined;
    }
  }

  async set(token: CachedToken, now: number): Promise<void> {
    const ttlMs = Math.floor(token.expiresAt - now);
    if (ttlMs <= 0) return;
    await this.#redis.set(this.#tokenKey, JSON.stringify(token), 'PX', ttlMs);
  }

  async invalidate(accessToken: string): Promise<void> {
    await this.#redis.eval(deleteIfTokenIs, 1, this.#tokenKey, accessToken);
  }

  lock(ttlMs: number): Promise<TokenLock | undefined> {
    return acquireRedisLock(this.#redis, this.#lockKey, ttlMs);
  }
}
