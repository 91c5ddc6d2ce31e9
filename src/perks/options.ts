import type { Logger } from 'pino';
import type { Dispatcher } from 'undici';
import type { RetryEvent, RetryOptions } from './retry.js';
import type { TokenCache } from './tokens.js';

interface PerksClientHooks {
  /** After every HTTP exchange, token requests included. `error` is the error's class name. */
  onRequest?(event: {
    operation: string;
    status: number | undefined;
    durationMs: number;
    error?: string;
  }): void;
  onTokenMinted?(): void;
  /** Before every wait followed by another try: backoff, or a short inline 429 wait. */
  onRetry?(event: RetryEvent): void;
}

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
  /** Keep-alive connections of the pool. Default 16. Ignored when `dispatcher` is given. */
  connections?: number;
  /** Larger response bodies are destroyed and fail the call. Default 8 MiB. */
  maxResponseBytes?: number;
  retry?: RetryOptions;
  /** A 429 asking for at most this wait is sat out once inside the call. Default 1000. */
  maxInlineThrottleWaitMs?: number;
  /** Where tokens are shared (Redis: between replicas). Default: this client only. */
  tokenCache?: TokenCache;
  /** Replaces the client's own Pool (tests pass undici's MockAgent). Not closed by close(). */
  dispatcher?: Dispatcher;
  logger?: Logger;
  hooks?: PerksClientHooks;
  /** Clock for token expiry (epoch ms). Default Date.now. */
  now?: () => number;
}

export interface CallOptions {
  signal?: AbortSignal;
}
