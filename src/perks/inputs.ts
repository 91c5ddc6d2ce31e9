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

export interface ListRewardPagesOptions {
  /** 1..1000. Default 1000: fewer requests per sync. */
  perPage?: number;
  /** Default '-executed_at' (newest transaction first). */
  sort?: string;
  /** Reward types to keep; sent as repeated `type` parameters. Default: all. */
  types?: string[];
  signal?: AbortSignal;
}

const enrollInputSchema = z
  .object({
    id: consumerIdSchema,
    extraConsents: z.array(consentSchema, { error: 'must be an array of consents' }).optional(),
    removedConsents: z.array(consentSchema, { error: 'must be an array of consents' }).optional(),
  })
  .refine(
    ({ extraConsents, removedConsents }) =>
      !removedConsents?.some((consent) => extraConsents?.includes(consent)),
    { path: ['removedConsents'], error: 'must not repeat a consent of extraConsents' },
  );
export type EnrollInput = z.input<typeof enrollInputSchema>;

const rewardIdsSchema = z.object({ consumerId: consumerIdSchema, rewardId: uuidSchema });

const listInputSchema = z.object({
  consumerId: consumerIdSchema,
  perPage: perPageSchema.default(MAX_PER_PAGE),
  sort: z
    .string()
    .regex(/^-?[a-z][a-z0-9_]*$/, { error: 'must be a field name, optionally prefixed -' })
    .default('-executed_at'),
  types: z
    .array(z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, { error: 'must be a reward type name' }))
    .default([]),
});

function check<T>(operation: string, schema: z.ZodType<T>, value: unknown): T {
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

/** The POST /perks/consumers body. */
export function checkEnrollInput(operation: string, input: EnrollInput) {
  const { id, extraConsents, removedConsents } = check(operation, enrollInputSchema, input);
  return {
    id,
    ...(extraConsents && { extra_consents: [...new Set(extraConsents)] }),
    ...(removedConsents && { removed_consents: [...new Set(removedConsents)] }),
  };
}

export function checkRewardIds(operation: string, consumerId: string, rewardId: string): void {
  check(operation, rewardIdsSchema, { consumerId, rewardId });
}

export function checkListInput(
  operation: string,
  consumerId: string,
  opts: ListRewardPagesOptions,
): { perPage: number; sort: string; types: string[] } {
  const { perPage, sort, types } = check(operation, listInputSchema, { ...opts, consumerId });
  return { perPage, sort, types: [...new Set(types)] };
}
