/**
 * Our own inputs, checked before any request: a bad consumer id, an unknown consent, a
 * non-uuid reward id or a per_page out of range is our bug, not the API's, and must not cost
 * a request, a retry or a token.
 */
import type { z } from 'zod';
import { InvalidInputError } from './errors.js';
import { formatPath } from './paging.js';
import {
  type Consent,
  consentSchema,
  consumerIdSchema,
  MAX_PER_PAGE,
  perPageSchema,
  uuidSchema,
} from './schemas.js';

export interface EnrollInput {
  id: string;
  extraConsents?: Consent[];
  removedConsents?: Consent[];
}

export interface ListRewardPagesOptions {
  /** 1..1000. Default 1000: fewer requests per sync. */
  perPage?: number;
  /** Default '-executed_at' (newest transaction first). */
  sort?: string;
  /** Reward types to keep; sent as repeated `type` parameters. Default: all. */
  types?: string[];
  signal?: AbortSignal;
}

/** The POST /perks/consumers body. */
export interface EnrollBody {
  id: string;
  extra_consents?: Consent[];
  removed_consents?: Consent[];
}

function check<T>(operation: string, field: string, schema: z.ZodType<T>, value: unknown): T {
  const parsed = schema.safeParse(value);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  const where = formatPath([field, ...(issue?.path ?? [])]);
  const shown = typeof value === 'string' ? ` (got ${JSON.stringify(value.slice(0, 120))})` : '';
  throw new InvalidInputError(`${operation}: ${where} ${issue?.message ?? 'is invalid'}${shown}`, {
    operation,
    field: where,
  });
}

function checkConsents(operation: string, field: string, value: unknown): Consent[] | undefined {
  if (value === undefined) return undefined;
  if (!Array.isArray(value)) {
    throw new InvalidInputError(`${operation}: ${field} must be an array of consents`, {
      operation,
      field,
    });
  }
  return value.map((consent, i) => check(operation, `${field}[${i}]`, consentSchema, consent));
}

export function checkEnrollInput(operation: string, input: EnrollInput): EnrollBody {
  const id = check(operation, 'id', consumerIdSchema, input?.id);
  const extra = checkConsents(operation, 'extraConsents', input?.extraConsents);
  const removed = checkConsents(operation, 'removedConsents', input?.removedConsents);
  const both = removed?.find((consent) => extra?.includes(consent));
  if (both !== undefined) {
    throw new InvalidInputError(`${operation}: removedConsents: ${both} is also in extraConsents`, {
      operation,
      field: 'removedConsents',
    });
  }
  const body: EnrollBody = { id };
  if (extra !== undefined) body.extra_consents = [...new Set(extra)];
  if (removed !== undefined) body.removed_consents = [...new Set(removed)];
  return body;
}

export function checkRewardIds(operation: string, consumerId: string, rewardId: string): void {
  check(operation, 'consumerId', consumerIdSchema, consumerId);
  check(operation, 'rewardId', uuidSchema, rewardId);
}

export function checkListInput(
  operation: string,
  consumerId: string,
  opts: ListRewardPagesOptions,
): { perPage: number; sort: string; types: string[] } {
  check(operation, 'consumerId', consumerIdSchema, consumerId);
  const perPage = check(operation, 'perPage', perPageSchema, opts.perPage ?? MAX_PER_PAGE);
  const sort = opts.sort ?? '-executed_at';
  if (!/^-?[a-z][a-z0-9_]*$/.test(sort)) {
    throw new InvalidInputError(`${operation}: sort must be a field name, optionally prefixed -`, {
      operation,
      field: 'sort',
    });
  }
  const types = opts.types ?? [];
  types.forEach((type, i) => {
    if (typeof type !== 'string' || !/^[A-Za-z0-9_-]{1,64}$/.test(type)) {
      throw new InvalidInputError(`${operation}: types[${i}] must be a reward type name`, {
        operation,
        field: `types[${i}]`,
      });
    }
  });
  return { perPage, sort, types: [...new Set(types)] };
}
