/**
 * The Perks client's errors. Callers branch on the class or on `code` (the API's full code),
 * never on a message; messages never hold the client secret or a token.
 */
import { z } from 'zod';
import type { HttpResponse } from './http.js';
import { redactSecrets } from './redact.js';

const errorItemSchema = z
  .object({
    loc: z.array(z.union([z.string(), z.number().int()])).optional(),
    msg: z.string().optional(),
    type: z.string().optional(),
  })
  .loose();

type PerksErrorItem = z.infer<typeof errorItemSchema>;

/** The error envelope; a malformed member degrades rather than hiding the code. */
const errorEnvelopeSchema = z
  .object({
    code: z.string().min(1),
    title: z.string().optional().catch(undefined),
    status: z.number().int().optional().catch(undefined),
    errors: z.array(errorItemSchema).nullable().optional().catch(null),
    instance: z.string().nullable().optional().catch(null),
  })
  .loose();

type ErrorEnvelope = z.infer<typeof errorEnvelopeSchema>;

/** What the API said about a failure (gateways may say none of it). */
export interface PerksErrorDetails {
  /** The API operation that failed, e.g. `getReward`, `mintToken`. */
  operation: string;
  status?: number | undefined;
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

export class NotFoundError extends PerksError {
  override readonly name = 'NotFoundError';
}

/** 400: the API rejected our request; `errors[].loc` points at the field. Never retried. */
export class ValidationError extends PerksError {
  override readonly name = 'ValidationError';
}

/** 401 (credentials or token refused) or 403 (token not allowed here); a 401 was re-minted once. */
export class AuthError extends PerksError {
  override readonly name = 'AuthError';
}

/** 409: the resource exists already, or the state transition is illegal. Never retried. */
export class ConflictError extends PerksError {
  override readonly name = 'ConflictError';
}

/** 429 whose wait is too long to sit out inside the call: the queue pauses `retryAfterMs`. */
export class ThrottledError extends PerksError {
  override readonly name = 'ThrottledError';
  readonly retryAfterMs: number;
  constructor(message: string, details: PerksErrorDetails & { retryAfterMs: number }) {
    super(message, details);
    this.retryAfterMs = details.retryAfterMs;
  }
}

/** The spec retries 500 and 502; 503/504 are gateways saying so. */
const retryableUpstream = new Set([500, 502, 503, 504]);

export class UpstreamError extends PerksError {
  override readonly name = 'UpstreamError';
  get retryable(): boolean {
    return this.status !== undefined && retryableUpstream.has(this.status);
  }
}

/**
 * No usable response: `transportCode` is undici's or Node's, or `ETIMEDOUT` for our deadline.
 * Retrying POST /perks/consumers is safe because a re-creation answers 409.
 */
export class TransportError extends PerksError {
  override readonly name = 'TransportError';
  readonly transportCode: string;
  constructor(message: string, details: PerksErrorDetails & { transportCode: string }) {
    super(message, { ...details, code: details.transportCode });
    this.transportCode = details.transportCode;
  }
}

/** A 2xx body that is not JSON or not the schema: `path` names the field, `index` the item. */
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

export class ResponseTooLargeError extends ResponseShapeError {
  override readonly name = 'ResponseTooLargeError';
}

/** Our own input, rejected before any request was sent. `field` names it. */
export class InvalidInputError extends PerksError {
  override readonly name = 'InvalidInputError';
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
  override readonly name = 'TokenMintError';
  static from(error: unknown): TokenMintError {
    if (error instanceof PerksError) {
      return new TokenMintError(error.message, { ...error, cause: error });
    }
    const message = error instanceof Error ? error.message : String(error);
    return new TokenMintError(`mintToken: ${message}`, { operation: 'mintToken', cause: error });
  }
}

export function isRetryable(error: unknown): boolean {
  if (error instanceof UpstreamError) return error.retryable;
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
  const envelope = parseEnvelope(response.body);
  const details: PerksErrorDetails = {
    operation,
    status,
    code: envelope?.code,
    title: envelope?.title,
    errors: envelope?.errors ?? null,
    instance: envelope?.instance ?? null,
  };
  const message = redactSecrets(describe(response, envelope), response.secrets);

  if (status === 400) return new ValidationError(message, details);
  if (status === 401 || status === 403) return new AuthError(message, details);
  if (status === 404) {
    // The spec's `ERR` stands for the program's prefix: match `<PFX>-404-02`.
    return /^[A-Za-z0-9_]+-404-02$/.test(envelope?.code ?? '')
      ? new ConsumerNotEnrolledError(message, details)
      : new NotFoundError(message, details);
  }
  if (status === 409) return new ConflictError(message, details);
  if (status === 429) {
    const retryAfterMs = parseRetryAfter(response.headers['retry-after']);
    return new ThrottledError(message, { ...details, retryAfterMs });
  }
  if (status >= 500 && status <= 599) return new UpstreamError(message, details);
  return new PerksError(message, details);
}

/** The JSON a body holds, or undefined: gateways answer with HTML, text or nothing. */
export function tryJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function parseEnvelope(body: string): ErrorEnvelope | undefined {
  const parsed = errorEnvelopeSchema.safeParse(tryJson(body));
  return parsed.success ? parsed.data : undefined;
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

function describeItem(item: PerksErrorItem): string {
  const loc = item.loc?.join('.') ?? '';
  const msg = item.msg ?? item.type ?? 'invalid';
  return loc ? `${loc}: ${msg}` : msg;
}

/** A printable excerpt: tags and control characters removed, whitespace collapsed. */
function bodySnippet(body: string): string {
  const text = body
    .replace(/<(script|style)[\s\S]*?<\/\1>/gi, ' ')
    .replace(/<[^>]*>/g, ' ')
    .replace(/[\p{Cc}\p{Cf}]/gu, ' ')
    .replace(/\s+/g, ' ')
    .trim();
  return text.length > SNIPPET_MAX_CHARS ? `${text.slice(0, SNIPPET_MAX_CHARS - 1)}…` : text;
}

/** Retry-After in delta-seconds or as an HTTP date -> ms: default if unusable, capped. */
export function parseRetryAfter(value: string | undefined, now: () => number = Date.now): number {
  const text = value?.trim() ?? '';
  let ms: number;
  if (/^\d+(\.\d+)?$/.test(text)) {
    ms = Math.ceil(Number(text) * 1000);
  } else {
    // Date.parse reads "-5" as a year: an HTTP date always names its day and month.
    const date = /[A-Za-z]/.test(text) ? Date.parse(text) : Number.NaN;
    if (Number.isNaN(date)) return DEFAULT_THROTTLE_DELAY_MS;
    ms = date - now();
  }
  return Math.min(Math.max(ms, 0), MAX_THROTTLE_DELAY_MS);
}
