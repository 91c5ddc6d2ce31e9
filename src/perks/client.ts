/**
 * The Perks API client: enrollment, one reward, reward pages. It knows HTTP and the API's
 * shapes, nothing of queues or SQL. Every call: our input checked before any request, a token
 * (re-minted once on 401), a bounded exchange, the typed error or the parsed body, retries on
 * retryable failures, one short inline wait on a brief 429.
 */
import { setMaxListeners } from 'node:events';
import { AbortError } from 'p-retry';
import { Pool } from 'undici';
import { AuthError, ConflictError, PerksError, ThrottledError, TokenMintError } from './errors.js';
import { type HttpResponse, parseJsonBody } from './http.js';
import {
  checkEnrollInput,
  checkListInput,
  checkRewardIds,
  type EnrollInput,
  type ListRewardPagesOptions,
} from './inputs.js';
import { parseRewardPage, type RewardPage, shapeError, walkRewardPages } from './paging.js';

export type { PerksClientOptions } from './options.js';
export type { RewardPage } from './paging.js';

import { linkSignals } from '../signals.js';
import type { CallOptions, PerksClientOptions } from './options.js';
import { defaultRetry, type RetryOptions, withRetry } from './retry.js';
import {
  enrollResponseSchema,
  type Reward,
  safeParseReward,
  tokenResponseSchema,
} from './schemas.js';
import { sleep } from './sleep.js';
import { InMemoryTokenCache } from './token-cache.js';
import { type MintedToken, TokenProvider } from './tokens.js';
import { type RequestSpec, Transport } from './transport.js';

/**
 * The spec says bodies are JSON, but leaves the token request's fields unsaid, and OAuth 2.0
 * token endpoints commonly take a form body. JSON first; a 400 or 415 switches to the form
 * once, and the format that worked is kept.
 */
type TokenEncoding = 'json' | 'form';

export class PerksClient {
  #tokenEncoding: TokenEncoding = 'json';
  readonly #transport: Transport;
  readonly #ownPool: Pool | undefined;
  readonly #options: PerksClientOptions;
  readonly #retry: Required<RetryOptions>;
  readonly #tokens: TokenProvider;
  readonly #basicAuth: string;
  readonly #closing = new AbortController();

  constructor(options: PerksClientOptions) {
    const base = new URL(options.baseUrl);
    this.#options = options;
    this.#retry = { ...defaultRetry, ...options.retry };
    // Every call in flight listens on the close signal (and detaches when done): with a busy
    // worker that is more than the default 10, which is not a leak.
    setMaxListeners(0, this.#closing.signal);
    this.#basicAuth = basicCredentials(options.clientId, options.clientSecret);
    // An injected dispatcher (tests: MockAgent) is the caller's to close; our own Pool is ours.
    const dispatcher =
      options.dispatcher ?? new Pool(base.origin, { connections: options.connections ?? 16 });
    this.#ownPool = options.dispatcher ? undefined : (dispatcher as Pool);
    this.#transport = new Transport({
      ...options,
      baseUrl: base.toString().replace(/\/+$/, ''),
      dispatcher,
      maxResponseBytes: options.maxResponseBytes ?? 8 * 1024 * 1024,
      basicAuth: this.#basicAuth,
    });
    const now = options.now ?? Date.now;
    this.#tokens = new TokenProvider({
      cache: options.tokenCache ?? new InMemoryTokenCache(now),
      mint: () => this.#mintToken(),
      now,
      logger: options.logger,
      onMinted: () => options.hooks?.onTokenMinted?.(),
    });
  }

  /** Enrolls a consumer. 409 means it was enrolled before: ids are deterministic. */
  async enrollConsumer(
    input: EnrollInput,
    opts: CallOptions = {},
  ): Promise<{ outcome: 'created' | 'already_enrolled' }> {
    const operation = 'enrollConsumer';
    const body = checkEnrollInput(operation, input);
    try {
      const response = await this.#call(
        operation,
        {
          method: 'POST',
          path: '/perks/consumers',
          body,
        },
        opts.signal,
      );
      // Any 2xx means the consumer now exists: the spec fixes neither the status nor the
      // body, so a body other than `{id}` is noted, never turned into a failure (a retry of
      // a created consumer would only get 409 and record it as already enrolled).
      if (!enrollResponseMatches(response)) {
        this.#options.logger?.warn(
          { operation, status: response.status },
          'perks: enrollment succeeded with an unexpected body',
        );
      }
      return { outcome: 'created' };
    } catch (error) {
      if (error instanceof ConflictError) return { outcome: 'already_enrolled' };
      throw error;
    }
  }

  async getReward(consumerId: string, rewardId: string, opts: CallOptions = {}): Promise<Reward> {
    const operation = 'getReward';
    checkRewardIds(operation, consumerId, rewardId);
    const path = `/perks/consumers/${encodeURIComponent(consumerId)}/rewards/${encodeURIComponent(rewardId)}`;
    const response = await this.#call(operation, { method: 'GET', path }, opts.signal);
    const parsed = safeParseReward(parseJsonBody(operation, response));
    if (!parsed.success) throw shapeError(operation, parsed.error);
    return parsed.data;
  }

  /**
   * The consumer's rewards, one page at a time (default 1000 a page, newest transaction
   * first). Our input is checked on the first iteration, before any request.
   */
  listRewardPages(
    consumerId: string,
    opts: ListRewardPagesOptions = {},
  ): AsyncIterable<RewardPage> {
    const operation = 'listRewardPages';
    const client = this;
    return {
      [Symbol.asyncIterator]() {
        const { perPage, sort, types } = checkListInput(operation, consumerId, opts);
        const path = `/perks/consumers/${encodeURIComponent(consumerId)}/rewards`;
        return walkRewardPages(operation, perPage, async (page) => {
          const query = new URLSearchParams({ page: String(page), per_page: String(perPage) });
          query.set('sort', sort);
          for (const type of types) query.append('type', type);
          const response = await client.#call(
            operation,
            { method: 'GET', path, query },
            opts.signal,
          );
          const parsed = parseRewardPage(operation, parseJsonBody(operation, response));
          client.#options.logger?.debug(
            { operation, page, items: parsed.items.length, total: parsed.total },
            'perks: fetched a rewards page',
          );
          return { ...parsed, json: response.body };
        });
      },
    };
  }

  /**
   * Mints a new access token now and shares it through the token cache: proves that the
   * credentials and the token endpoint work. Throws TokenMintError.
   */
  async checkCredentials(): Promise<void> {
    try {
      await this.#tokens.mint();
    } catch (error) {
      throw TokenMintError.from(error);
    }
  }

  /** Stops token refreshes and closes the client's own pool (an injected dispatcher is left open). */
  async close(): Promise<void> {
    this.#closing.abort(new PerksError('the Perks client is closed', { operation: 'close' }));
    await this.#ownPool?.close();
  }

  /** One API call with a bearer token: retries, 401 re-mint and short 429 wait included. */
  async #call(operation: string, spec: RequestSpec, signal?: AbortSignal): Promise<HttpResponse> {
    const linked = linkSignals([signal, this.#closing.signal]);
    try {
      return await this.#callWithRetries(operation, spec, linked.signal);
    } finally {
      linked.dispose();
    }
  }

  async #callWithRetries(
    operation: string,
    spec: RequestSpec,
    callSignal: AbortSignal,
  ): Promise<HttpResponse> {
    const maxInlineWaitMs = this.#options.maxInlineThrottleWaitMs ?? 1_000;
    let reminted = false;
    let waitedOnThrottle = false;
    return withRetry(this.#retryContext(operation, callSignal), async (attempt) => {
      for (;;) {
        let token: string;
        try {
          token = await this.#tokens.accessToken(callSignal);
        } catch (error) {
          // The mint has its own retries: retrying it again here would multiply them. A 429
          // stays a ThrottledError (the queues pause for it), and a cancel stays a cancel.
          const passOn = callSignal.aborted || error instanceof ThrottledError;
          throw new AbortError(passOn ? asError(error) : TokenMintError.from(error));
        }
        try {
          return await this.#transport.send(operation, spec, `Bearer ${token}`, callSignal);
        } catch (error) {
          if (error instanceof AuthError && error.status === 401 && !reminted) {
            reminted = true;
            await this.#tokens.invalidate(token);
            continue;
          }
          if (
            error instanceof ThrottledError &&
            !waitedOnThrottle &&
            error.retryAfterMs <= maxInlineWaitMs
          ) {
            waitedOnThrottle = true;
            const delayMs = error.retryAfterMs;
            this.#options.hooks?.onRetry?.({ operation, attempt, delayMs, reason: error.message });
            await sleep(delayMs, callSignal);
            continue;
          }
          throw error;
        }
      }
    });
  }

  async #mintToken(): Promise<MintedToken> {
    const operation = 'mintToken';
    return withRetry(this.#retryContext(operation, this.#closing.signal), async () => {
      const send = (encoding: TokenEncoding) =>
        this.#transport.send(
          operation,
          { method: 'POST', path: '/tokens', body: { grant_type: 'client_credentials' }, encoding },
          `Basic ${this.#basicAuth}`,
          this.#closing.signal,
        );
      let response: HttpResponse;
      try {
        response = await send(this.#tokenEncoding);
      } catch (error) {
        const refusedBody =
          error instanceof PerksError && (error.status === 400 || error.status === 415);
        if (!refusedBody) throw error;
        const other: TokenEncoding = this.#tokenEncoding === 'json' ? 'form' : 'json';
        response = await send(other);
        this.#tokenEncoding = other;
      }
      const parsed = tokenResponseSchema.safeParse(parseJsonBody(operation, response));
      if (!parsed.success) throw shapeError(operation, parsed.error);
      return { accessToken: parsed.data.access_token, lifetimeMs: parsed.data.expires_in * 1000 };
    });
  }

  #retryContext(operation: string, signal: AbortSignal) {
    return {
      operation,
      retry: this.#retry,
      signal,
      onRetry: this.#options.hooks?.onRetry?.bind(this.#options.hooks),
      logger: this.#options.logger,
    };
  }
}

/** True when a 2xx enrollment answer is the documented JSON `{id}`. */
function enrollResponseMatches(response: HttpResponse): boolean {
  try {
    return enrollResponseSchema.safeParse(JSON.parse(response.body)).success;
  } catch {
    return false;
  }
}

const asError = (thrown: unknown): Error =>
  thrown instanceof Error ? thrown : new Error(String(thrown));

/**
 * HTTP Basic credentials of POST /tokens. RFC 6749 §2.3.1: the id and the secret are each
 * form-urlencoded before they are joined by `:` and base64-encoded, so a secret holding `:`
 * or `%` reaches the server intact.
 */
export function basicCredentials(clientId: string, clientSecret: string): string {
  const formEncode = (part: string) => new URLSearchParams({ p: part }).toString().slice(2);
  return Buffer.from(`${formEncode(clientId)}:${formEncode(clientSecret)}`).toString('base64');
}
