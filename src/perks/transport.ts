/**
 * One exchange with the API: the request built from a RequestSpec (JSON or form body, the
 * mandatory headers), a bounded read of the answer, a non-2xx turned into its typed error,
 * and every exchange reported to the hooks and the debug log. No retries, no tokens: the
 * client adds those.
 */
import type { Dispatcher } from 'undici';
import { errorFromResponse } from './error-mapping.js';
import { exchange, type HttpResponse } from './http.js';
import type { PerksClientOptions } from './options.js';

export interface RequestSpec {
  method: 'GET' | 'POST';
  path: string;
  query?: URLSearchParams;
  body?: unknown;
  /** How `body` is encoded. Default json. */
  encoding?: 'json' | 'form';
}

export interface TransportOptions
  extends Pick<
    PerksClientOptions,
    'apiVersion' | 'timeoutMs' | 'clientSecret' | 'hooks' | 'logger'
  > {
  /** The base URL without a trailing slash. */
  baseUrl: string;
  dispatcher: Dispatcher;
  maxResponseBytes: number;
  /** The Basic credentials of POST /tokens, redacted from every message like the secret. */
  basicAuth: string;
}

export class Transport {
  readonly #options: TransportOptions;

  constructor(options: TransportOptions) {
    this.#options = options;
  }

  /** One exchange; a non-2xx becomes its typed error. */
  async send(
    operation: string,
    spec: RequestSpec,
    authorization: string,
    signal: AbortSignal,
  ): Promise<HttpResponse> {
    const headers: Record<string, string> = {
      authorization,
      'x-api-version': this.#options.apiVersion ?? '2.0.0',
      accept: 'application/json',
    };
    let body: string | undefined;
    if (spec.body !== undefined && spec.encoding === 'form') {
      body = new URLSearchParams(spec.body as Record<string, string>).toString();
      headers['content-type'] = 'application/x-www-form-urlencoded';
    } else if (spec.body !== undefined) {
      body = JSON.stringify(spec.body);
      headers['content-type'] = 'application/json';
    }
    const query = spec.query?.toString();
    const url = `${this.#options.baseUrl}${spec.path}${query ? `?${query}` : ''}`;
    const secrets = [
      this.#options.clientSecret,
      this.#options.basicAuth,
      authorization.replace(/^\S+ /, ''),
    ];
    const startedAt = performance.now();
    let status: number | undefined;
    try {
      const response = await exchange(
        {
          dispatcher: this.#options.dispatcher,
          timeoutMs: this.#options.timeoutMs ?? 10_000,
          maxResponseBytes: this.#options.maxResponseBytes,
          secrets,
        },
        {
          operation,
          method: spec.method,
          url,
          headers,
          signal,
          ...(body === undefined ? {} : { body }),
        },
      );
      status = response.status;
      if (status < 200 || status > 299) {
        throw errorFromResponse({
          operation,
          status,
          headers: response.headers,
          body: response.body,
          secrets,
        });
      }
      this.#report(operation, status, startedAt);
      return response;
    } catch (error) {
      this.#report(operation, status, startedAt, error);
      throw error;
    }
  }

  #report(operation: string, status: number | undefined, startedAt: number, error?: unknown): void {
    const durationMs = Math.round(performance.now() - startedAt);
    const errorName =
      error === undefined ? undefined : error instanceof Error ? error.name : 'Error';
    this.#options.hooks?.onRequest?.({
      operation,
      status,
      durationMs,
      ...(errorName === undefined ? {} : { error: errorName }),
    });
    this.#options.logger?.debug(
      { operation, status, durationMs, error: errorName },
      'perks: request',
    );
  }
}
