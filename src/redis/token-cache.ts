/**
 * The Perks access token shared through Redis, so N replicas mint one token an hour, not N: the
 * key expires with the token, and a lock lets one replica mint while the others poll. `name`
 * (`credentialsName`) keeps API clients sharing a prefix apart.
 */
import { createHash } from 'node:crypto';
import { z } from 'zod';
import { tryJson } from '../perks/errors.js';
import type { CachedToken, TokenCache, TokenLock } from '../perks/tokens.js';
import type { RedisClient } from './connection.js';
import { acquireRedisLock } from './lock.js';

const storedSchema = z.object({
  accessToken: z.string().min(1),
  expiresAt: z.number(),
  refreshAt: z.number(),
});

// A replica that saw a 401 must not drop the fresh token another has just stored.
const deleteIfTokenIs = `
local value = redis.call('GET', KEYS[1])
if not value then return 0 end
local ok, decoded = pcall(cjson.decode, value)
if ok and decoded.accessToken == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`;

/**
 * The client id and a hash of the base URL and secret: a token is only used by a process that
 * holds the credentials that minted it (a wrong secret must not work through a cached token).
 */
export function credentialsName(perks: {
  baseUrl: string;
  clientId: string;
  clientSecret: string;
}) {
  const hash = createHash('sha256').update(`${perks.baseUrl}\n${perks.clientSecret}`);
  return `${perks.clientId}:${hash.digest('hex').slice(0, 16)}`;
}

export class RedisTokenCache implements TokenCache {
  readonly #redis: RedisClient;
  readonly #tokenKey: () => string;

  /** `prefix`: the queue prefix (`{perks}` on a cluster); `name` follows a credentials change. */
  constructor(options: { redis: RedisClient; prefix: string; name?: string | (() => string) }) {
    const { prefix, name = 'default' } = options;
    this.#redis = options.redis;
    this.#tokenKey = () => `${prefix}:perks:token:${typeof name === 'string' ? name : name()}`;
  }

  async get(): Promise<CachedToken | undefined> {
    const value = await this.#redis.get(this.#tokenKey());
    return storedSchema.safeParse(value === null ? undefined : tryJson(value)).data;
  }

  async set(token: CachedToken, now: number): Promise<void> {
    const ttlMs = Math.floor(token.expiresAt - now);
    if (ttlMs <= 0) return;
    await this.#redis.set(this.#tokenKey(), JSON.stringify(token), 'PX', ttlMs);
  }

  async invalidate(accessToken: string): Promise<void> {
    await this.#redis.eval(deleteIfTokenIs, 1, this.#tokenKey(), accessToken);
  }

  lock(ttlMs: number): Promise<TokenLock | undefined> {
    return acquireRedisLock(this.#redis, `${this.#tokenKey()}:lock`, ttlMs);
  }
}
