/**
 * The one error hierarchy of the Perks client. Callers branch on the class (or on `code`, the
 * API's full error code), never on a message. Messages are built from status, code, title and
 * a sanitized body snippet: they never hold the client secret or a token.
 */

/** One item of the envelope's `errors` array. The API may add keys; they are kept. */
export interface PerksErrorItem {
  loc?: Array<string | number>;
  msg?: string;
  type?: string;
  [extra: string]: unknown;
}

/** What the API said about a failure. Every field is optional: gateways answer without it. */
export interface PerksErrorDetails {
  /** The API operation that failed, e.g. `getReward`, `mintToken`. */
  operation: string;
  /** HTTP status; undefined when no response arrived (transport failures, our own checks). */
  status?: number | undefined;
  /** The envelope's full code, e.g. `ERR-404-02`, when the body was the envelope. */
  code?: string | undefined;
  title?: string | undefined;
  errors?: PerksErrorItem[] | null | undefined;
  instance?: string | null | undefined;
  cause?: unknown;
}

export class PerksError extends Error {
  override readonly name: string = 'PerksError';
  readonly operation: string;
  readonly status: number | undefined;
  readonly code: string | undefined;
  readonly title: string | undefined;
  readonly errors: PerksErrorItem[] | null;
  readonly instance: string | null;

  constructor(message: string, details: PerksErrorDetails) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    this.operation = details.operation;
    this.status = details.status;
    this.code = details.code;
    this.title = details.title;
    this.errors = details.errors ?? null;
    this.instance = details.instance ?? null;
  }
}

/** 404 with `<PFX>-404-02`: the consumer must be enrolled first. */
export class ConsumerNotEnrolledError extends PerksError {
  override readonly name = 'ConsumerNotEnrolledError';
}

/** Any other 404: no resource matches the identifier. */
export class NotFoundError extends PerksError {
  override readonly name = 'NotFoundError';
}

/** 400: the API rejected our request; `errors[].loc` points at the field. Never retried. */
export class ValidationError extends PerksError {
  override readonly name = 'ValidationError';
}

/**
 * 401 (credentials or token missing, malformed or expired) or 403 (token not allowed here:
 * wrong program, environment or scope). `status` tells which. A 401 on an API call has already
 * been answered by minting a new token and retrying once.
 */
export class AuthError extends PerksError {
  override readonly name = 'AuthError';
}

/** 409: the resource exists already, or the state transition is illegal. Never retried. */
export class ConflictError extends PerksError {
  override readonly name = 'ConflictError';
}

/**
 * 429 whose wait is too long to sit out inside the call. The queue layer should pause for
 * `retryAfterMs` (e.g. `queue.rateLimit(retryAfterMs)`) rather than burn attempts.
 */
export class ThrottledError extends PerksError {
  override readonly name = 'ThrottledError';
  readonly retryAfterMs: number;
  constructor(message: string, details: PerksErrorDetails & { retryAfterMs: number }) {
    super(message, details);
    this.retryAfterMs = details.retryAfterMs;
  }
}

/** Statuses worth retrying: the spec retries 500 and 502; 503/504 are gateways saying so. */
const retryableUpstream = new Set([500, 502, 503, 504]);

/** A 5xx, with or without the envelope. 500/502/503/504 are retried with backoff. */
export class UpstreamError extends PerksError {
  override readonly name = 'UpstreamError';
  get retryable(): boolean {
    return this.status !== undefined && retryableUpstream.has(this.status);
  }
}

/**
 * No usable response: timeout, connection reset or refused, DNS failure. `transportCode` is
 * the undici/Node code (`ECONNRESET`, `UND_ERR_HEADERS_TIMEOUT`, ...), or `ETIMEDOUT` when our
 * own per-request deadline fired. Retried with backoff: for POST /perks/consumers this is safe
 * only because consumer ids are deterministic and a re-creation answers 409.
 */
export class TransportError extends PerksError {
  override readonly name = 'TransportError';
  readonly transportCode: string;
  constructor(message: string, details: PerksErrorDetails & { transportCode: string }) {
    super(message, { ...details, code: details.transportCode });
    this.transportCode = details.transportCode;
  }
}

/**
 * A 2xx whose body is not JSON or does not match the schema. `path` names the field, e.g.
 * `items[3].amount`; `index` is the item's index in a page when there is one.
 */
export class ResponseShapeError extends PerksError {
  override readonly name: string = 'ResponseShapeError';
  readonly path: string;
  readonly index: number | undefined;
  constructor(message: string, details: PerksErrorDetails & { path?: string; index?: number }) {
    super(message, details);
    this.path = details.path ?? '';
    this.index = details.index;
  }
}

/** A response body longer than `maxResponseBytes`: it was destroyed unread. */
export class ResponseTooLargeError extends ResponseShapeError {
  override readonly name = 'ResponseTooLargeError';
}

/** Our own input was rejected before any request was sent. `field` names it. */
export class InvalidInputError extends PerksError {
  override readonly name = 'InvalidInputError';
  readonly field: string;
  constructor(message: string, details: { operation: string; field: string }) {
    super(message, { operation: details.operation });
    this.field = details.field;
  }
}

/**
 * POST /tokens failed, after its own retries, so the call it was for was never sent. Whatever
 * its status, it is about our credentials or the token endpoint, never about the consumer of
 * a job: jobs retry it like an outage. `cause` is the mint's own error (an AuthError, a
 * TransportError, a ResponseShapeError...), whose status and code it repeats.
 */
export class TokenMintError extends PerksError {
  override readonly name = 'TokenMintError';
  static from(error: unknown): TokenMintError {
    if (!(error instanceof PerksError)) {
      const message = error instanceof Error ? error.message : String(error);
      return new TokenMintError(`mintToken: ${message}`, { operation: 'mintToken', cause: error });
    }
    const { message, operation, status, code, title, errors, instance } = error;
    return new TokenMintError(message, {
      operation,
      status,
      code,
      title,
      errors,
      instance,
      cause: error,
    });
  }
}

/** Whether the retry policy may try the call again after this error. */
export function isRetryable(error: unknown): boolean {
  if (error instanceof UpstreamError) return error.retryable;
  if (error instanceof TransportError) return !error.transportCode.startsWith('UND_ERR_INVALID');
  return false;
}
