/**
 * The Perks API's shapes, parsed at the boundary. Strict where the spec is explicit (patterns,
 * lengths, formats, required keys), tolerant where it is silent: reward `type` and `status`
 * are open sets, and extra fields are accepted and kept in `raw`. Our own inputs are checked
 * before any request: a bad one is our bug, and must not cost a request, a retry or a token.
 */
import { z } from 'zod';
import { InvalidInputError } from './errors.js';

export const CONSENTS = [
  'BASIC',
  'TRANSACTION_TRIGGERS',
  'TARGETING',
  'STATISTICS',
  'SMART_RANKING',
  'WEB_ANALYTICS',
] as const;
export type Consent = (typeof CONSENTS)[number];
export const consentSchema = z.enum(CONSENTS);

export const consumerIdSchema = z
  .string()
  .min(2, { error: 'must be 2 to 100 characters' })
  .max(100, { error: 'must be 2 to 100 characters' })
  .regex(/^[a-zA-Z0-9_-]+$/, { error: 'must match ^[a-zA-Z0-9_-]+$' });

export function isConsumerId(value: string): boolean {
  return consumerIdSchema.safeParse(value).success;
}

/** Any 8-4-4-4-12 hex id: the spec names no version, and z.uuid() demands RFC 9562 bits. */
export const uuidSchema = z.guid({ error: 'must be a uuid' });

/** The spec's exact amount pattern: rejects "", "+", ".", "1e5", "12,5". */
export const AMOUNT_PATTERN = /^(?!^[-+.]*$)[+-]?0*\d*\.?\d*$/;

/** Already canonical (nearly every amount the API sends). */
const CANONICAL_PATTERN = /^(?:0|[1-9]\d*)(?:\.\d+)?$|^-(?:[1-9]\d*(?:\.\d+)?|0\.\d*[1-9]\d*)$/;

/**
 * A decimal string without `+`, leading zeros, trailing dot or sign on zero; fractional
 * digits kept (they carry the precision): "+0012.50" -> "12.50", ".5" -> "0.5", "-0.0" -> "0.0".
 */
export function canonicalDecimal(value: string): string {
  if (CANONICAL_PATTERN.test(value)) return value;
  if (!AMOUNT_PATTERN.test(value)) {
    throw new RangeError(`not a decimal amount: ${JSON.stringify(value.slice(0, 40))}`);
  }
  const [whole = '', fraction = ''] = value.replace(/^[+-]/, '').split('.');
  const integer = whole.replace(/^0+/, '') || '0';
  const digits = fraction === '' ? integer : `${integer}.${fraction}`;
  const isZero = /^[0.]*$/.test(digits);
  return value.startsWith('-') && !isZero ? `-${digits}` : digits;
}

/** Fits PostgreSQL's numeric: 131072 digits before the point (leading zeros aside), 16383 after. */
function fitsNumeric(amount: string): boolean {
  if (amount.length <= 16383) return true;
  const [whole = '', fraction = ''] = amount.replace(/^[+-]/, '').split('.');
  return whole.replace(/^0+/, '').length <= 131072 && fraction.length <= 16383;
}

const amountPatternSchema = z
  .string()
  .regex(AMOUNT_PATTERN, { error: 'must be a decimal string matching the spec pattern' })
  .refine(fitsNumeric, { error: 'must have at most 131072 digits before the point, 16383 after' });

export const amountSchema = amountPatternSchema.transform(canonicalDecimal);

/** A NUL or an unpaired surrogate: PostgreSQL stores neither, in text or in jsonb. */
const UNSTORABLE = /\0|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
export const storable = (text: string) => !UNSTORABLE.test(text);
export const UNSTORABLE_MESSAGE = 'must not contain a NUL character or an unpaired surrogate';

/** JSON text can only carry either as an escape: a body without one needs no deeper look. */
const ESCAPED_UNSTORABLE = /\\u(?:0000|d[89a-f])/i;
export const mayHoldUnstorable = (json: string) => ESCAPED_UNSTORABLE.test(json);

/** The path of the first string of `value` PostgreSQL cannot store; of its object for a key. */
function unstorablePath(value: unknown, path: PropertyKey[] = []): PropertyKey[] | null {
  if (typeof value === 'string') return storable(value) ? null : path;
  if (typeof value !== 'object' || value === null) return null;
  for (const [key, inner] of Object.entries(value)) {
    if (!storable(key)) return path;
    const found = unstorablePath(inner, [...path, Array.isArray(value) ? Number(key) : key]);
    if (found) return found;
  }
  return null;
}

/** Years 0001 to 9999, offsets within ±15:59: what timestamptz takes. */
const storableDateTime = (value: string) =>
  !value.startsWith('0000') && !/[+-](?:1[6-9]|2\d):?\d\d$/.test(value);
const STORABLE_DATE_TIME = { error: 'must be a date-time from year 0001, offset within ±15:59' };

const CONSUMER_STATUSES = ['VALIDATION', 'POOLED', 'PAID'] as const;
export type ConsumerStatus = (typeof CONSUMER_STATUSES)[number];

// Strings the spec gives no length: an empty one is stored as sent, not refused.
const transactionSchema = z.looseObject({
  external_id: z.string(),
  // Shared conventions: "Timestamps: RFC 3339, UTC, always Z-suffixed" (this one too).
  executed_at: z.iso
    .datetime({ error: 'must be an RFC 3339 date-time in UTC (Z)' })
    .refine(storableDateTime, STORABLE_DATE_TIME),
});

/** RFC 3986 absolute URI: scheme ":" then only URI characters (z.url() trims and takes spaces). */
const ABSOLUTE_URI = /^[A-Za-z][A-Za-z0-9+.-]*:(?:[\w\-.~:/?#[\]@!$&'()*+,;=]|%[0-9A-Fa-f]{2})+$/;

const brandSchema = z.looseObject({
  name: z.string().nullable(),
  // Any scheme, as the spec says "URI": whoever renders a logo picks the schemes it shows.
  logo: z
    .string()
    .max(2083, { error: 'must be at most 2083 characters' })
    .refine((uri) => ABSOLUTE_URI.test(uri) && URL.canParse(uri), {
      error: 'must be an absolute URI',
    })
    .nullable()
    .optional(),
});

/** A reward on the wire, compiled (twice as fast): it parses every reward of every page. */
const wireRewardSchema = z.compile(
  z.looseObject({
    id: uuidSchema,
    amount: amountPatternSchema,
    // RFC 3339 in UTC with the Z suffix, as the spec's conventions require.
    created_at: z.iso
      .datetime({ error: 'must be an RFC 3339 date-time in UTC (Z)' })
      .refine(storableDateTime, STORABLE_DATE_TIME),
    type: z.string(),
    status: z.string(),
    consumer_status: z.enum(CONSUMER_STATUSES),
    transaction: transactionSchema.nullable(),
    brand: brandSchema,
  }),
);

/** Structurally the store's `RewardRecord`; `raw` is the item as received, extras included. */
export interface Reward {
  id: string;
  amount: string;
  createdAt: string;
  /** Open sets: the spec lists known values, not all of them. */
  type: 'CASHBACK' | 'GIFT' | (string & {});
  status: 'VALIDATED' | 'PAID_IN' | 'PAID_OUT' | (string & {});
  consumerStatus: ConsumerStatus;
  transaction: { externalId: string; executedAt: string } | null;
  brand: { name: string | null; logo?: string | null };
  raw: Record<string, unknown>;
}

/**
 * One reward item -> Reward, or the error naming the failing field. Mapped after the parse (a
 * zod pipe about doubles the cost), so the wire schema's output is the item as received (`raw`).
 */
export function safeParseReward(
  item: unknown,
  /** Also look for strings PostgreSQL cannot store (mayHoldUnstorable said there may be one). */
  deep = false,
): { success: true; data: Reward } | { success: false; error: z.ZodError } {
  const parsed = wireRewardSchema.safeParse(item);
  if (!parsed.success) return { success: false, error: parsed.error };
  const path = deep ? unstorablePath(item) : null;
  if (path) {
    const issue = { code: 'custom', path, message: UNSTORABLE_MESSAGE, input: undefined } as const;
    return { success: false, error: new z.ZodError([issue]) };
  }
  const wire = parsed.data;
  const { name, logo } = wire.brand;
  const data = {
    id: wire.id.toLowerCase(),
    amount: canonicalDecimal(wire.amount),
    createdAt: wire.created_at,
    type: wire.type,
    status: wire.status,
    consumerStatus: wire.consumer_status,
    transaction: wire.transaction && {
      externalId: wire.transaction.external_id,
      executedAt: wire.transaction.executed_at,
    },
    brand: logo === undefined ? { name } : { name, logo },
    raw: wire,
  };
  return { success: true, data };
}

/** Items are parsed one by one, to name the index of a bad one. */
export const collectionSchema = z.compile(
  z.object({
    items: z.array(z.unknown()),
    meta: z.object({
      page: z.number().int().min(1),
      per_page: z.number().int().min(1),
      total: z.number().int().min(0),
    }),
  }),
);

export const enrollResponseSchema = z.looseObject({ id: z.string().min(1) });

/** POST /tokens. Only expires_in is named by the spec; the others are OAuth 2.0's names. */
export const tokenResponseSchema = z.object({
  access_token: z.string().min(1),
  token_type: z
    .string()
    .refine((type) => type.toLowerCase() === 'bearer', { error: 'must be Bearer' })
    .optional(),
  // A number by the spec; some servers send it as a numeric string.
  expires_in: z
    .union([
      z.number(),
      z
        .string()
        .trim()
        .regex(/^\d+(?:\.\d+)?$/)
        .transform(Number),
    ])
    .pipe(z.number().positive()),
});

export const MAX_PER_PAGE = 1000;
export const perPageSchema = z
  .number()
  .int({ error: 'must be a whole number' })
  .min(1, { error: 'must be 1 to 1000' })
  .max(MAX_PER_PAGE, { error: 'must be 1 to 1000' });

const consentsSchema = z
  .array(consentSchema, { error: 'must be an array of consents' })
  .transform((consents) => [...new Set(consents)])
  .optional();

/** Checks an enrollment and turns it into the POST /perks/consumers body. */
export const enrollInputSchema = z
  .object({ id: consumerIdSchema, extraConsents: consentsSchema, removedConsents: consentsSchema })
  .refine(
    ({ extraConsents, removedConsents }) =>
      !removedConsents?.some((consent) => extraConsents?.includes(consent)),
    { path: ['removedConsents'], error: 'must not repeat a consent of extraConsents' },
  )
  .transform(({ id, extraConsents, removedConsents }) => ({
    id,
    ...(extraConsents && { extra_consents: extraConsents }),
    ...(removedConsents && { removed_consents: removedConsents }),
  }));
export type EnrollInput = z.input<typeof enrollInputSchema>;

export const rewardIdsSchema = z.object({ consumerId: consumerIdSchema, rewardId: uuidSchema });

export const listInputSchema = z.object({
  consumerId: consumerIdSchema,
  /** 1..1000. Default 1000: fewer requests per sync. */
  perPage: perPageSchema.default(MAX_PER_PAGE),
  /** Default '-executed_at' (newest transaction first). */
  sort: z
    .string()
    .regex(/^-?[a-z][a-z0-9_]*$/, { error: 'must be a field name, optionally prefixed -' })
    .default('-executed_at'),
  /** Reward types to keep; sent as repeated `type` parameters. Default: all. */
  types: z
    .array(z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, { error: 'must be a reward type name' }))
    .transform((types) => [...new Set(types)])
    .default([]),
});
export type ListRewardPagesOptions = Omit<z.input<typeof listInputSchema>, 'consumerId'> & {
  signal?: AbortSignal;
};

/** `value` parsed by `schema`, or an InvalidInputError naming the first bad field. */
export function checkInput<T>(operation: string, schema: z.ZodType<T>, value: unknown): T {
  const parsed = schema.safeParse(value, { reportInput: true });
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  const field = z.core.toDotPath(issue?.path ?? []);
  const input = issue?.input;
  const shown = typeof input === 'string' ? ` (got ${JSON.stringify(input.slice(0, 120))})` : '';
  const message = `${operation}: ${field} ${issue?.message ?? 'is invalid'}${shown}`;
  throw new InvalidInputError(message, { operation, field });
}
