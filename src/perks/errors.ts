/**
 * The Perks client's errors. Callers branch on the class or on `code` (the API's full code),
 * never on a message; messages never hold the client secret or a token.
 */
import { z } from 'zod';
import { clip } from '../errors.js';
import type { HttpResponse } from './http.js';
import { redactDeep, redactSecrets } from './redact.js';

const errorItemSchema = z.looseObject({
  loc: z.array(z.union([z.string(), z.number().int()])).optional(),
  msg: z.string().optional(),
  type: z.string().optional(),
});

/** The error envelope; a malformed member degrades rather than hiding the code. */
const errorEnvelopeSchema = z.object({
  code: z.string().min(1),
  title: z.string().optional().catch(undefined),
  status: z.number().int().optional().catch(undefined),
  errors: z.array(errorItemSchema).nullable().optional().catch(null),
  instance: z.string().nullable().optional().catch(null),
});

type ErrorEnvelope = z.infer<typeof errorEnvelopeSchema>;

/** What the API said about a failure (gateways may say none of it); `status` is the HTTP one. */
export type PerksErrorDetails = Partial<ErrorEnvelope> & {
  /** The API operation that failed, e.g. `getReward`, `mintToken`. */
  operation: string;
  cause?: unknown;
};

/** The base class; `name` is the subclass's own name. */
export class PerksError extends Error {
  override readonly name: string;
  readonly operation: string;
  readonly status: number | undefined;
  readonly code: string | undefined;
  readonly title: string | undefined;
  readonly errors: z.infer<typeof errorItemSchema>[] | null;
  readonly instance: string | null;

  constructor(message: string, details: PerksErrorDetails) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    this.name = new.target.name;
    this.operation = details.operation;
    this.status = details.status;
    this.code = details.code;
    this.title = details.title;
    this.errors = details.errors ?? null;
    this.instance = details.instance ?? null;
  }
}

/** 400: the API rejected our request; `errors[].loc` points at the field. Never retried. */
export class ValidationError extends PerksError {}
/** 401 (credentials or token refused) or 403 (token not allowed here); a 401 was re-minted once. */
export class AuthError extends PerksError {}
export class NotFoundError extends PerksError {}
/** 404 with `<PFX>-404-02`: the consumer must be enrolled first. */
export class ConsumerNotEnrolledError extends PerksError {}
/** 409: the resource exists already, or the state transition is illegal. Never retried. */
export class ConflictError extends PerksError {}
/** 5xx; the spec retries 500 and 502, and 503/504 are gateways saying so. */
export class UpstreamError extends PerksError {}

const classByStatus: Record<number, typeof PerksError> = {
  400: ValidationError,
  401: AuthError,
  403: AuthError,
  404: NotFoundError,
  409: ConflictError,
};

/** 429 whose wait is too long to sit out inside the call: the queue pauses `retryAfterMs`. */
export class ThrottledError extends PerksError {
  readonly retryAfterMs: number;
  constructor(message: string, details: PerksErrorDetails & { retryAfterMs: number }) {
    super(message, details);
    this.retryAfterMs = details.retryAfterMs;
  }
}

/**
 * No usable response: `transportCode` is undici's or Node's, or `ETIMEDOUT` for our deadline.
 * Retrying POST /perks/consumers is safe because a re-creation answers 409.
 */
export class TransportError extends PerksError {
  readonly transportCode: string;
  constructor(message: string, details: PerksErrorDetails & { transportCode: string }) {
    super(message, { ...details, code: details.transportCode });
    this.transportCode = details.transportCode;
  }
}

/** A 2xx body that is not JSON or not the schema: `path` names the field. */
export class ResponseShapeError extends PerksError {
  readonly path: string;
  constructor(message: string, details: PerksErrorDetails & { path?: string }) {
    super(message, details);
    this.path = details.path ?? '';
  }
}

export class ResponseTooLargeError extends ResponseShapeError {}

/** Our own input, rejected before any request was sent. `field` names it. */
export class InvalidInputError extends PerksError {
  readonly field: string;
  constructor(message: string, details: { operation: string; field: string }) {
    super(message, { operation: details.operation });
    this.field = details.field;
  }
}

/**
 * POST /tokens failed after its own retries: about our credentials, never a job's consumer,
 * so jobs retry it like an outage. It repeats the status and code of its `cause`.
 */
export class TokenMintError extends PerksError {
  static from(error: unknown): TokenMintError {
    if (error instanceof PerksError) {
      return new TokenMintError(error.message, { ...error, cause: error });
    }
    const message = error instanceof Error ? error.message : String(error);
    return new TokenMintError(`mintToken: ${message}`, { operation: 'mintToken', cause: error });
  }
}

export function isRetryable(error: unknown): boolean {
  if (error instanceof UpstreamError) return [500, 502, 503, 504].includes(error.status ?? 0);
  if (error instanceof TransportError) return !error.transportCode.startsWith('UND_ERR_INVALID');
  return false;
}

const DEFAULT_THROTTLE_DELAY_MS = 5_000;
/** A misconfigured gateway must not park a queue for days. */
const MAX_THROTTLE_DELAY_MS = 15 * 60_000;
const SNIPPET_MAX_CHARS = 200;

/** A non-2xx answer, with the values to mask in its message (secret, current token). */
type FailedResponse = HttpResponse & { operation: string; secrets: readonly string[] };

/** The status decides the class, the envelope code refines it; a gateway's HTML yields a snippet. */
export function errorFromResponse(response: FailedResponse): PerksError {
  const { operation, status } = response;
  const parsed = errorEnvelopeSchema.safeParse(tryJson(response.body)).data;
  // Its members end up on the error (title, errors, instance): masked as the message is.
  const envelope = parsed && redactDeep(parsed, response.secrets);
  const details = { ...envelope, operation, status };
  const message = redactSecrets(describe(response, envelope), response.secrets);
  // The spec's `ERR` stands for the program's prefix: match `<PFX>-404-02`.
  if (status === 404 && /^[A-Za-z0-9_]+-404-02$/.test(envelope?.code ?? '')) {
    return new ConsumerNotEnrolledError(message, details);
  }
  if (status === 429) {
    const retryAfterMs = parseRetryAfter(response.headers['retry-after']);
    return new ThrottledError(message, { ...details, retryAfterMs });
  }
  const ErrorClass =
    classByStatus[status] ?? (status >= 500 && status <= 599 ? UpstreamError : PerksError);
  return new ErrorClass(message, details);
}

/** The JSON a body holds, or undefined: gateways answer with HTML, text or nothing. */
export function tryJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function describe(response: FailedResponse, envelope: ErrorEnvelope | undefined): string {
  const head = `${response.operation}: HTTP ${response.status}`;
  if (!envelope) {
    const snippet = bodySnippet(response.body);
    return snippet ? `${head}, body: "${snippet}"` : `${head}, empty body`;
  }
  const errors = envelope.errors ?? [];
  const items = errors.slice(0, 3).map(describeItem).join('; ');
  const more = errors.length > 3 ? ` (+${errors.length - 3} more)` : '';
  return `${head} ${envelope.code} ${envelope.title}${items ? `: ${items}${more}` : ''}`;
}

const describeItem = ({ loc, msg, type }: z.infer<typeof errorItemSchema>) =>
  [loc?.join('.'), msg ?? type ?? 'invalid'].filter(Boolean).join(': ');

/** A printable excerpt: tags and control characters removed, whitespace collapsed. */
function bodySnippet(body: string): string {
  const text = body
    .replace(/<(script|style)[\s\S]*?<\/\1>/gi, ' ')
    .replace(/<[^>]*>/g, ' ')
    .replace(/[\p{Cc}\p{Cf}]/gu, ' ')
    .replace(/\s+/g, ' ')
    .trim();
  return clip(text, SNIPPET_MAX_CHARS);
}

/**
 * Retry-After in delta-seconds or as an HTTP date -> ms: default if unusable, capped. Sent more
 * than once (a gateway and the API each), the longest wait.
 */
export function parseRetryAfter(
  value: string | string[] | undefined,
  now: () => number = Date.now,
): number {
  if (Array.isArray(value)) {
    const waits = value.map((one) => parseRetryAfter(one, now));
    return waits.length > 0 ? Math.max(...waits) : DEFAULT_THROTTLE_DELAY_MS;
  }
  const text = value?.trim() ?? '';
  // Date.parse reads "-5" as a year: an HTTP date always names its day and month.
  const ms = /^\d+(\.\d+)?$/.test(text)
    ? Math.ceil(Number(text) * 1000)
    : /[A-Za-z]/.test(text)
      ? Date.parse(text) - now()
      : Number.NaN;
  if (Number.isNaN(ms)) return DEFAULT_THROTTLE_DELAY_MS;
  return Math.min(Math.max(ms, 0), MAX_THROTTLE_DELAY_MS);
}
