/**
 * Our own inputs, checked before any request: a bad one is our bug, not the API's, and must
 * not cost a request, a retry or a token.
 */
import { z } from 'zod';
import { InvalidInputError } from './errors.js';
import {
  consentSchema,
  consumerIdSchema,
  MAX_PER_PAGE,
  perPageSchema,
  uuidSchema,
} from './schemas.js';

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
  throw new InvalidInputError(`${operation}: ${field} ${issue?.message ?? 'is invalid'}${shown}`, {
    operation,
    field,
  });
}
