/**
 * A non-2xx response -> the typed error. The HTTP status decides the class first; the full
 * envelope code refines it (two codes sharing a status have unrelated causes). Gateways and
 * throttlers may answer with HTML, plain text or nothing: that yields a clear error with a
 * short sanitized snippet, never a JSON parse crash.
 */
import { z } from 'zod';
import {
  AuthError,
  ConflictError,
  ConsumerNotEnrolledError,
  NotFoundError,
  PerksError,
  type PerksErrorDetails,
  ThrottledError,
  UpstreamError,
  ValidationError,
} from './errors.js';
import { redactSecrets } from './redact.js';

/** Used when a 429 carries no usable Retry-After: long enough for the queue to back off. */
const DEFAULT_THROTTLE_DELAY_MS = 5_000;
/** A Retry-After beyond this is capped: a misconfigured gateway must not park a queue for days. */
const MAX_THROTTLE_DELAY_MS = 15 * 60_000;
const SNIPPET_MAX_CHARS = 200;

const errorItemSchema = z
  .object({
    loc: z.array(z.union([z.string(), z.number().int()])).optional(),
    msg: z.string().optional(),
    type: z.string().optional(),
  })
  .loose();

/** The error envelope. Extension members are tolerated (`.loose()`). */
const errorEnvelopeSchema = z
  .object({
    code: z.string().min(1),
    // Required by the spec, but a code without them still says what happened: keep it.
    title: z.string().optional().catch(undefined),
    status: z.number().int().optional().catch(undefined),
    // A malformed `errors` must not hide the code and title: it degrades to null.
    errors: z.array(errorItemSchema).nullable().optional().catch(null),
    instance: z.string().nullable().optional().catch(null),
  })
  .loose();

type ErrorEnvelope = z.infer<typeof errorEnvelopeSchema>;

/**
 * The spec writes codes as `ERR-404-02` but says `ERR` stands for the program's prefix, so a
 * code is matched on everything after the prefix: `<PFX>-<status>-<NN>`.
 */
export function codeMatches(code: string | undefined, statusAndNumber: string): boolean {
  return code !== undefined && new RegExp(`^[A-Za-z0-9_]+-${statusAndNumber}$`).test(code);
}

export interface FailedResponse {
  operation: string;
  status: number;
  /** Lower-cased header names, as undici gives them. */
  headers: Record<string, string | string[] | undefined>;
  body: string;
  /** Values that must never appear in a message (secret, current token). */
  secrets?: readonly string[];
  now?: () => number;
}

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
  const message = redactSecrets(describe(response, envelope), response.secrets ?? []);

  if (status === 400) return new ValidationError(message, details);
  if (status === 401 || status === 403) return new AuthError(message, details);
  if (status === 404) {
    return codeMatches(envelope?.code, '404-02')
      ? new ConsumerNotEnrolledError(message, details)
      : new NotFoundError(message, details);
  }
  if (status === 409) return new ConflictError(message, details);
  if (status === 429) {
    const retryAfterMs = parseRetryAfter(header(response.headers, 'retry-after'), response.now);
    return new ThrottledError(message, { ...details, retryAfterMs });
  }
  if (status >= 500 && status <= 599) return new UpstreamError(message, details);
  return new PerksError(message, details);
}

function parseEnvelope(body: string): ErrorEnvelope | undefined {
  const text = body.trim();
  if (!text.startsWith('{')) return undefined;
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return undefined;
  }
  const parsed = errorEnvelopeSchema.safeParse(json);
  return parsed.success ? parsed.data : undefined;
}

function describe(response: FailedResponse, envelope: ErrorEnvelope | undefined): string {
  const head = `${response.operation}: HTTP ${response.status}`;
  if (envelope) {
    const items = (envelope.errors ?? []).slice(0, 3).map(describeItem).join('; ');
    const more =
      (envelope.errors?.length ?? 0) > 3 ? ` (+${(envelope.errors?.length ?? 0) - 3} more)` : '';
    return `${head} ${envelope.code} ${envelope.title}${items ? `: ${items}${more}` : ''}`;
  }
  const snippet = bodySnippet(response.body);
  return snippet ? `${head}, body: "${snippet}"` : `${head}, empty body`;
}

function describeItem(item: z.infer<typeof errorItemSchema>): string {
  const loc = item.loc?.join('.') ?? '';
  const msg = item.msg ?? item.type ?? 'invalid';
  return loc ? `${loc}: ${msg}` : msg;
}

/**
 * A short, printable excerpt of a non-envelope body: tags and control characters removed,
 * whitespace collapsed, at most 200 characters.
 */
function bodySnippet(body: string): string {
  const text = body
    .replace(/<(script|style)[\s\S]*?<\/\1>/gi, ' ')
    .replace(/<[^>]*>/g, ' ')
    .replace(/[\p{Cc}\p{Cf}]/gu, ' ')
    .replace(/\s+/g, ' ')
    .trim();
  return text.length > SNIPPET_MAX_CHARS ? `${text.slice(0, SNIPPET_MAX_CHARS - 1)}…` : text;
}

function header(headers: FailedResponse['headers'], name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? value[0] : value;
}

/**
 * Retry-After is either delta-seconds or an HTTP date. Absent or unparseable -> the default;
 * a date in the past -> 0; anything huge is capped.
 */
export function parseRetryAfter(value: string | undefined, now: () => number = Date.now): number {
  if (value === undefined || value.trim() === '') return DEFAULT_THROTTLE_DELAY_MS;
  const text = value.trim();
  let ms: number;
  if (/^\d+(\.\d+)?$/.test(text)) {
    ms = Math.ceil(Number(text) * 1000);
  } else {
    // Date.parse reads "-5" as a year: an HTTP date always names its day and month.
    if (!/[A-Za-z]/.test(text)) return DEFAULT_THROTTLE_DELAY_MS;
    const date = Date.parse(text);
    if (Number.isNaN(date)) return DEFAULT_THROTTLE_DELAY_MS;
    ms = date - now();
  }
  return Math.min(Math.max(ms, 0), MAX_THROTTLE_DELAY_MS);
}
