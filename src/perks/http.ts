/**
 * One HTTP exchange with the Perks API: undici `request` on a keep-alive dispatcher, a
 * deadline covering headers and body, a bounded body read. The body is consumed or destroyed
 * on every path, so a connection is never left hanging in the pool.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { type Dispatcher, request } from 'undici';
import { linkSignals } from '../signals.js';
import { PerksError, ResponseShapeError, ResponseTooLargeError, TransportError } from './errors.js';
import { redactSecrets } from './redact.js';

export interface HttpExchangeOptions {
  dispatcher: Dispatcher;
  /** Deadline of the whole exchange (connect, headers and body), in milliseconds. */
  timeoutMs: number;
  /** Bodies larger than this are destroyed unread and fail the call. */
  maxResponseBytes: number;
  /** Values masked in any message built here. */
  secrets: readonly string[];
}

export interface HttpRequest {
  operation: string;
  method: 'GET' | 'POST';
  /** Absolute URL, query included. */
  url: string;
  headers: Record<string, string>;
  body?: string;
  signal?: AbortSignal | undefined;
}

export interface HttpResponse {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
}

export async function exchange(
  options: HttpExchangeOptions,
  req: HttpRequest,
): Promise<HttpResponse> {
  const linked = linkSignals([req.signal], options.timeoutMs);
  const signal = linked.signal;
  try {
    const response = await request(req.url, {
      dispatcher: options.dispatcher,
      method: req.method,
      headers: req.headers,
      body: req.body,
      signal,
      headersTimeout: options.timeoutMs,
      bodyTimeout: options.timeoutMs,
    });
    const body = await readBody(response.body, response.headers, options.maxResponseBytes, req);
    return { status: response.statusCode, headers: response.headers, body };
  } catch (error) {
    // The caller's own cancellation is not a transport failure: it must not be retried.
    if (req.signal?.aborted) throw req.signal.reason;
    if (error instanceof PerksError) throw error;
    const transportCode = linked.timedOut() ? 'ETIMEDOUT' : transportCodeOf(error);
    const reason = linked.timedOut()
      ? `no complete response within ${options.timeoutMs} ms`
      : error instanceof Error
        ? error.message
        : String(error);
    throw new TransportError(
      redactSecrets(`${req.operation}: ${transportCode} ${reason}`, options.secrets),
      { operation: req.operation, transportCode, cause: error },
    );
  } finally {
    linked.dispose();
  }
}

async function readBody(
  body: Dispatcher.ResponseData['body'],
  headers: IncomingHttpHeaders,
  maxBytes: number,
  req: HttpRequest,
): Promise<string> {
  const declared = Number(headers['content-length']);
  if (Number.isFinite(declared) && declared > maxBytes) {
    // Destroyed unread, the body emits an abort error: expected here, and with no listener
    // it would be thrown as uncaught once the whole body had arrived before this check.
    body.on('error', () => undefined).destroy();
    throw tooLarge(req, maxBytes);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  // Leaving the loop early (throw) destroys the stream, releasing the socket.
  for await (const chunk of body) {
    const buffer = typeof chunk === 'string' ? Buffer.from(chunk) : (chunk as Buffer);
    size += buffer.length;
    if (size > maxBytes) {
      body.destroy();
      throw tooLarge(req, maxBytes);
    }
    chunks.push(buffer);
  }
  // A body of one chunk is decoded without a copy first.
  return (chunks.length === 1 && chunks[0] ? chunks[0] : Buffer.concat(chunks)).toString('utf8');
}

function tooLarge(req: HttpRequest, maxBytes: number): ResponseTooLargeError {
  return new ResponseTooLargeError(
    `${req.operation}: response body exceeds maxResponseBytes (${maxBytes} bytes)`,
    { operation: req.operation },
  );
}

function transportCodeOf(error: unknown): string {
  if (typeof error === 'object' && error !== null) {
    const code = (error as { code?: unknown }).code;
    if (typeof code === 'string' && code) return code;
    const cause = (error as { cause?: unknown }).cause;
    if (cause !== undefined && cause !== error) return transportCodeOf(cause);
    if ((error as { name?: unknown }).name === 'TimeoutError') return 'ETIMEDOUT';
  }
  return 'UNKNOWN';
}

/** A 2xx body -> JSON, or a ResponseShapeError saying it is not JSON. */
export function parseJsonBody(operation: string, response: HttpResponse): unknown {
  try {
    return JSON.parse(response.body);
  } catch {
    const kind = response.body.trim() === '' ? 'an empty body' : 'a body that is not JSON';
    throw new ResponseShapeError(`${operation}: HTTP ${response.status} with ${kind}`, {
      operation,
      status: response.status,
    });
  }
}
