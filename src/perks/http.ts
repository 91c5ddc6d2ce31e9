/**
 * One exchange, no retries, no tokens: a deadline over headers and body, a bounded read that
 * consumes or destroys the body on every path (no connection left hanging in the pool).
 */
import type { Dispatcher } from 'undici';
import { linkSignals } from '../signals.js';
import type { PerksClientOptions } from './client.js';
import type { ConcurrencyLimit, Outcome } from './concurrency.js';
import {
  errorFromResponse,
  PerksError,
  ResponseShapeError,
  ResponseTooLargeError,
  TransportError,
  tryJson,
} from './errors.js';
import { redactSecrets } from './redact.js';

export interface RequestSpec {
  operation: string;
  method: 'GET' | 'POST';
  path: string;
  query?: URLSearchParams;
  /** Sent as JSON, or as a form when it is URLSearchParams. */
  body?: object;
}

export interface HttpResponse {
  status: number;
  /** A header sent more than once is an array. */
  headers: Dispatcher.ResponseData['headers'];
  body: string;
  /** When its request went out: the answer shows the API's state then or later. */
  sentAt: Date;
}

/** The client's options, defaults filled in. */
export type TransportOptions = PerksClientOptions &
  Required<Pick<PerksClientOptions, 'dispatcher' | 'timeoutMs' | 'maxResponseBytes'>> & {
    /** `baseUrl` split once: undici's `request(url)` parsed the whole URL again on every call. */
    origin: string;
    /** The base URL's path, without a trailing slash ('' for none). */
    basePath: string;
    /** Requests in flight, adapting; none: as many as the dispatcher takes. */
    concurrency?: ConcurrencyLimit;
  };

/** One exchange; a non-2xx becomes its typed error. */
export async function send(
  options: TransportOptions,
  spec: RequestSpec,
  authorization: string,
  callSignal: AbortSignal,
): Promise<HttpResponse> {
  const { operation, method } = spec;
  const { timeoutMs, maxResponseBytes } = options;
  // The credentials' value (Basic) or the token (Bearer) after the scheme.
  const secrets = [options.clientSecret, authorization.replace(/^\S+ /, '')];
  const headers: Record<string, string> = {
    authorization,
    'x-api-version': options.apiVersion ?? '2.0.0',
    accept: 'application/json',
  };
  const form = spec.body instanceof URLSearchParams;
  const body = spec.body && (form ? spec.body.toString() : JSON.stringify(spec.body));
  if (body !== undefined) {
    headers['content-type'] = form ? 'application/x-www-form-urlencoded' : 'application/json';
  }
  const query = spec.query?.toString();
  const path = `${options.basePath}${spec.path}${query ? `?${query}` : ''}`;
  const done = await options.concurrency?.acquire(callSignal);
  const startedAt = performance.now();
  const sentAt = new Date();
  const linked = linkSignals([callSignal], timeoutMs);
  let status: number | undefined;
  let errorName: string | undefined;
  try {
    const response = await options.dispatcher.request({
      origin: options.origin,
      path,
      method,
      headers,
      body,
      signal: linked.signal,
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
    });
    const text = await readBody(response, maxResponseBytes, operation);
    status = response.statusCode;
    const result = { status, headers: response.headers, body: text, sentAt };
    if (status < 200 || status > 299) throw errorFromResponse({ operation, ...result, secrets });
    return result;
  } catch (error) {
    let failure = error;
    // The caller's own cancellation is not a transport failure: it must not be retried.
    if (callSignal.aborted) failure = callSignal.reason;
    else if (!(error instanceof PerksError)) {
      const transportCode = linked.timedOut() ? 'ETIMEDOUT' : transportCodeOf(error);
      const reason = linked.timedOut()
        ? `no complete response within ${timeoutMs} ms`
        : error instanceof Error
          ? error.message
          : String(error);
      const message = redactSecrets(`${operation}: ${transportCode} ${reason}`, secrets);
      failure = new TransportError(message, { operation, transportCode, cause: error });
    }
    errorName = failure instanceof Error ? failure.name : 'Error';
    throw failure;
  } finally {
    linked.dispose();
    const elapsedMs = performance.now() - startedAt;
    done?.(callSignal.aborted ? 'ignore' : outcomeOf(status, linked.timedOut()), elapsedMs);
    const durationMs = Math.round(elapsedMs);
    const event = { operation, status, durationMs };
    options.hooks?.onRequest?.(errorName === undefined ? event : { ...event, error: errorName });
    options.logger?.debug({ ...event, error: errorName }, 'perks: request');
  }
}

/** What an exchange says of the load: 429, 5xx and a timeout say "too much". */
function outcomeOf(status: number | undefined, timedOut: boolean): Outcome {
  if (timedOut || status === 429 || (status !== undefined && status >= 500)) return 'overload';
  return status === undefined ? 'ignore' : 'ok';
}

async function readBody(
  { body, headers }: Dispatcher.ResponseData,
  maxBytes: number,
  operation: string,
): Promise<string> {
  const tooLarge = () =>
    new ResponseTooLargeError(
      `${operation}: response body exceeds maxResponseBytes (${maxBytes} bytes)`,
      { operation },
    );
  if (Number(headers['content-length']) > maxBytes) {
    // Destroyed unread, the body emits an abort error: with no listener it would be uncaught.
    body.on('error', () => undefined).destroy();
    throw tooLarge();
  }
  const chunks: Buffer[] = [];
  let size = 0;
  // Leaving the loop early (throw) destroys the stream, releasing the socket.
  for await (const buffer of body as AsyncIterable<Buffer>) {
    size += buffer.length;
    if (size > maxBytes) {
      body.destroy();
      throw tooLarge();
    }
    chunks.push(buffer);
  }
  // A body of one chunk is decoded without a copy first.
  return (chunks.length === 1 && chunks[0] ? chunks[0] : Buffer.concat(chunks)).toString('utf8');
}

function transportCodeOf(error: unknown): string {
  if (typeof error === 'object' && error !== null) {
    const { code, cause, name } = error as { code?: unknown; cause?: unknown; name?: unknown };
    if (typeof code === 'string' && code) return code;
    if (cause !== undefined && cause !== error) return transportCodeOf(cause);
    if (name === 'TimeoutError') return 'ETIMEDOUT';
  }
  return 'UNKNOWN';
}

/** A 2xx body -> JSON, or a ResponseShapeError saying it is not JSON. */
export function parseJsonBody(operation: string, response: HttpResponse): unknown {
  const { status, body } = response;
  const json = tryJson(body);
  if (json !== undefined) return json;
  const kind = body.trim() === '' ? 'an empty body' : 'a body that is not JSON';
  throw new ResponseShapeError(`${operation}: HTTP ${status} with ${kind}`, { operation, status });
}

/**
 * HTTP Basic credentials of POST /tokens. RFC 6749 §2.3.1: id and secret are each form-encoded
 * before the `:` join and base64, so a secret holding `:` or `%` reaches the server intact.
 */
export function basicCredentials(clientId: string, clientSecret: string): string {
  const formEncode = (part: string) => new URLSearchParams({ p: part }).toString().slice(2);
  return Buffer.from(`${formEncode(clientId)}:${formEncode(clientSecret)}`).toString('base64');
}
