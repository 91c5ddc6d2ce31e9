/**
 * The Perks API client (no queues, no SQL). Every call: input checked first, a token (re-minted
 * once on 401), retries, one short inline wait on a brief 429, then a typed error or the body.
 */
import { setMaxListeners } from 'node:events';
import { AbortError } from 'p-retry';
import type { Logger } from 'pino';
import { type Dispatcher, Pool } from 'undici';
import { linkSignals } from '../signals.js';
import { ConcurrencyLimit } from './concurrency.js';
import {
  AuthError,
  ConflictError,
  PerksError,
  ResponseShapeError,
  ThrottledError,
  TokenMintError,
  tryJson,
} from './errors.js';
import {
  basicCredentials,
  type HttpResponse,
  parseJsonBody,
  type RequestSpec,
  send,
  type TransportOptions,
} from './http.js';
import { parseRewardPage, type RewardPage, shapeError, walkRewardPages } from './paging.js';
import { defaultRetry, type RetryEvent, type RetryOptions, sleep, withRetry } from './retry.js';
import {
  checkInput,
  type EnrollInput,
  enrollInputSchema,
  enrollResponseSchema,
  type ListRewardPagesOptions,
  listInputSchema,
  type Reward,
  rewardIdsSchema,
  safeParseReward,
  tokenResponseSchema,
} from './schemas.js';
import { type TokenCache, TokenProvider } from './tokens.js';

/** A consumer and a reward no program holds: asked for to probe credentials (`check`, outages). */
export const probeIds = {
  consumerId: 'perks-worker-check',
  rewardId: '00000000-0000-4000-8000-000000000000',
} as const;

export type { RewardPage } from './paging.js';

export interface PerksClientOptions {
  /** Base URL of the program, e.g. https://api.perks.example/programs/acme. */
  baseUrl: string;
  clientId: string;
  /** Sent only to POST /tokens; never logged, never in an error message. */
  clientSecret: string;
  /** The `x-api-version` header. Default '2.0.0'. */
  apiVersion?: string;
  /** Deadline of one HTTP exchange (headers and body). Default 10000. */
  timeoutMs?: number;
  /**
   * Keep-alive connections of the pool, and the most requests in flight: below it the number
   * adapts to the API's answers (concurrency.ts). Default 16.
   */
  connections?: number;
  /** Larger response bodies are destroyed and fail the call. Default 8 MiB. */
  maxResponseBytes?: number;
  retry?: RetryOptions;
  /** A 429 asking for at most this wait is sat out once inside the call. Default 1000. */
  maxInlineThrottleWaitMs?: number;
  /** Credentials that may change (a rotation); default `clientId` and `clientSecret`, fixed. */
  credentials?: CredentialSource;
  /** Where tokens are shared (Redis: between replicas). Default: this client only. */
  tokenCache?: TokenCache;
  /** Replaces the client's own Pool (tests pass undici's MockAgent). Not closed by close(). */
  dispatcher?: Dispatcher;
  logger?: Logger;
  hooks?: {
    /** After every HTTP exchange, token requests included. `error` is the error's class name. */
    onRequest?(event: RequestEvent): void;
    onTokenMinted?(): void;
    /** Before every wait followed by another try: backoff, or a short inline 429 wait. */
    onRetry?(event: RetryEvent): void;
  };
  /** Clock for token expiry (epoch ms). Default Date.now. */
  now?: () => number;
}

/** The credentials a mint presents; after a refusal, `reread` says whether new ones are there. */
export interface CredentialSource {
  current(): { clientId: string; clientSecret: string };
  reread(why: string): boolean;
}

type CallOptions = { signal?: AbortSignal };
type EnrollOutcome = { outcome: 'created' | 'already_enrolled' };
type RequestEvent = { operation: string; status?: number; durationMs: number; error?: string };

export class PerksClient {
  /**
   * The spec leaves the token request's encoding unsaid, and OAuth 2.0 token endpoints commonly
   * take a form: JSON first, a 400 or 415 switches to the other once, and what worked is kept.
   */
  #formTokenBody = false;
  readonly #transport: TransportOptions;
  readonly #ownPool: Pool | undefined;
  readonly #options: PerksClientOptions;
  readonly #retry: typeof defaultRetry;
  readonly #tokens: TokenProvider;
  readonly #closing = new AbortController();
  /** Requests in flight: the limit found, the number now and the peak. */
  readonly concurrency: ConcurrencyLimit;

  constructor(options: PerksClientOptions) {
    const base = new URL(options.baseUrl);
    this.#options = options;
    this.#retry = { ...defaultRetry, ...options.retry };
    // Every call in flight listens on the close signal: more than 10 is no leak.
    setMaxListeners(0, this.#closing.signal);
    // An injected dispatcher (tests: MockAgent) is the caller's to close; our own Pool is ours.
    this.#ownPool = options.dispatcher
      ? undefined
      : new Pool(base.origin, { connections: options.connections ?? 16 });
    this.concurrency = new ConcurrencyLimit({ max: options.connections ?? 16 });
    this.#transport = {
      ...options,
      concurrency: this.concurrency,
      baseUrl: base.toString().replace(/\/+$/, ''),
      origin: base.origin,
      basePath: base.pathname.replace(/\/+$/, ''),
      dispatcher: options.dispatcher ?? (this.#ownPool as Pool),
      timeoutMs: options.timeoutMs ?? 10_000,
      maxResponseBytes: options.maxResponseBytes ?? 8 * 1024 * 1024,
    };
    this.#tokens = new TokenProvider({
      ...options,
      mint: () => this.#mintToken(),
      now: options.now ?? Date.now,
    });
  }

  /** Enrolls a consumer. 409 means it was enrolled before: ids are deterministic. */
  async enrollConsumer(input: EnrollInput, opts: CallOptions = {}): Promise<EnrollOutcome> {
    const operation = 'enrollConsumer';
    const body = checkInput(operation, enrollInputSchema, input);
    try {
      const spec = { operation, method: 'POST', path: '/perks/consumers', body } as const;
      const response = await this.#call(spec, opts.signal);
      // Any 2xx means the consumer exists; the spec's body is its id: another consumer's is
      // refused, a body without one only noted.
      const { status } = response;
      const id = enrollResponseSchema.safeParse(tryJson(response.body)).data?.id;
      if (id === undefined) {
        this.#options.logger?.warn(
          { operation, status },
          'perks: enrollment with an unexpected body',
        );
      } else if (id !== body.id) {
        const message = `${operation}: response id ${JSON.stringify(id.slice(0, 120))} is not ours`;
        throw new ResponseShapeError(message, { operation, status, path: 'id' });
      }
      return { outcome: 'created' };
    } catch (error) {
      if (error instanceof ConflictError) return { outcome: 'already_enrolled' };
      throw error;
    }
  }

  async getReward(consumerId: string, rewardId: string, opts: CallOptions = {}): Promise<Reward> {
    const operation = 'getReward';
    checkInput(operation, rewardIdsSchema, { consumerId, rewardId });
    const path = `/perks/consumers/${encodeURIComponent(consumerId)}/rewards/${encodeURIComponent(rewardId)}`;
    const response = await this.#call({ operation, method: 'GET', path }, opts.signal);
    const parsed = safeParseReward(parseJsonBody(operation, response));
    if (!parsed.success) throw shapeError(operation, parsed.error);
    return parsed.data;
  }

  /** The consumer's rewards, a page at a time; input checked on the first iteration. */
  async *listRewardPages(
    consumerId: string,
    opts: ListRewardPagesOptions = {},
  ): AsyncGenerator<RewardPage, void, undefined> {
    const operation = 'listRewardPages';
    const input = checkInput(operation, listInputSchema, { ...opts, consumerId });
    const path = `/perks/consumers/${encodeURIComponent(consumerId)}/rewards`;
    yield* walkRewardPages(operation, input.perPage, async (page) => {
      const { perPage, sort, types } = input;
      const query = new URLSearchParams({ page: String(page), per_page: String(perPage), sort });
      for (const type of types) query.append('type', type);
      const response = await this.#call({ operation, method: 'GET', path, query }, opts.signal);
      const parsed = parseRewardPage(operation, parseJsonBody(operation, response), response.body);
      this.#options.logger?.debug(
        { operation, page, items: parsed.ids.length, total: parsed.total },
        'perks: fetched a rewards page',
      );
      const requestedAt = response.sentAt;
      // With an item left out, the body is no longer what the valid items parse from.
      if (parsed.rejected.length > 0) return { ...parsed, requestedAt };
      return { ...parsed, items: undefined, json: response.body, requestedAt };
    });
  }

  /** Mints a token now and shares it: proves the credentials work. Throws TokenMintError. */
  async checkCredentials(): Promise<void> {
    await this.#tokens.mint().catch((error: unknown) => Promise.reject(TokenMintError.from(error)));
  }

  /**
   * checkCredentials, then a GET of a made-up consumer's reward: a 404 (or 200) proves the
   * token's scope and program too; a 403 throws as a refused mint does. Other answers are the
   * API's health, not the credentials': they pass.
   */
  async checkCredentialsInUse(): Promise<void> {
    await this.checkCredentials();
    await this.getReward(probeIds.consumerId, probeIds.rewardId).catch((error: unknown) => {
      if (error instanceof AuthError && error.status === 403) throw TokenMintError.from(error);
    });
  }

  /** Stops token refreshes and closes the client's own pool (an injected dispatcher is left open). */
  async close(): Promise<void> {
    this.#closing.abort(new PerksError('the Perks client is closed', { operation: 'close' }));
    await this.#ownPool?.close();
  }

  /** One API call with a bearer token: retries, 401 re-mint and short 429 wait included. */
  async #call(spec: RequestSpec, callerSignal?: AbortSignal): Promise<HttpResponse> {
    const { operation } = spec;
    const maxInlineWaitMs = this.#options.maxInlineThrottleWaitMs ?? 1_000;
    const { signal, dispose } = linkSignals([callerSignal, this.#closing.signal]);
    let reminted = false;
    let waitedOnThrottle = false;
    const context = { ...this.#options, operation, signal, retry: this.#retry };
    return withRetry(context, async (attempt) => {
      for (;;) {
        const token = await this.#tokens.accessToken(signal).catch((error: unknown) => {
          // The mint retried already: retrying it here would multiply its tries. A 429 stays a
          // ThrottledError (the queues pause for it), and a cancel stays a cancel.
          const passOn = signal.aborted || error instanceof ThrottledError;
          throw new AbortError(passOn ? (error as Error) : TokenMintError.from(error));
        });
        try {
          return await send(this.#transport, spec, `Bearer ${token}`, signal);
        } catch (error) {
          if (error instanceof AuthError && error.status === 401 && !reminted) {
            reminted = true;
            await this.#tokens.invalidate(token);
            continue;
          }
          const throttled = error instanceof ThrottledError && !waitedOnThrottle;
          if (throttled && error.retryAfterMs <= maxInlineWaitMs) {
            waitedOnThrottle = true;
            const delayMs = error.retryAfterMs;
            this.#options.hooks?.onRetry?.({ operation, attempt, delayMs, reason: error.message });
            await sleep(delayMs, signal);
            continue;
          }
          throw error;
        }
      }
    }).finally(dispose);
  }

  /** A refused mint tries at once the credentials a rotation may have written meanwhile. */
  async #mintToken() {
    return this.#mintOnce().catch((error: unknown) => {
      const reread =
        error instanceof AuthError && this.#options.credentials?.reread('token mint refused');
      if (!reread) throw error;
      return this.#mintOnce();
    });
  }

  async #mintOnce() {
    const operation = 'mintToken';
    const signal = this.#closing.signal;
    const { clientId, clientSecret } = this.#options.credentials?.current() ?? this.#options;
    const basicAuth = basicCredentials(clientId, clientSecret);
    const transport = { ...this.#transport, clientSecret };
    return withRetry({ ...this.#options, operation, signal, retry: this.#retry }, async () => {
      const post = (form: boolean) => {
        const grant = { grant_type: 'client_credentials' };
        const body = form ? new URLSearchParams(grant) : grant;
        const spec = { operation, method: 'POST', path: '/tokens', body } as const;
        return send(transport, spec, `Basic ${basicAuth}`, signal);
      };
      const response = await post(this.#formTokenBody).catch(async (error: unknown) => {
        if (!(error instanceof PerksError) || ![400, 415].includes(error.status ?? 0)) throw error;
        const answer = await post(!this.#formTokenBody);
        this.#formTokenBody = !this.#formTokenBody;
        return answer;
      });
      const parsed = tokenResponseSchema.safeParse(parseJsonBody(operation, response));
      if (!parsed.success) throw shapeError(operation, parsed.error);
      return { accessToken: parsed.data.access_token, lifetimeMs: parsed.data.expires_in * 1000 };
    });
  }
}
