/**
 * Request validation with the spec's field-level errors: every problem is reported, each with
 * its `loc` path (`["body","extra_consents",1]`, `["query","per_page"]`), a message and a
 * machine-readable type.
 */
import { defaultRewardSort, type RewardSort, rewardSorts } from './consumer-rewards.js';
import type { ErrorItem } from './reply.js';

export const consents = [
  'BASIC',
  'TRANSACTION_TRIGGERS',
  'TARGETING',
  'STATISTICS',
  'SMART_RANKING',
  'WEB_ANALYTICS',
] as const;

const consumerIdPattern = /^[a-zA-Z0-9_-]+$/;
const uuidPattern = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Problems with a consumer id found at `loc` (body or path). */
export function consumerIdErrors(value: unknown, loc: (string | number)[]): ErrorItem[] {
  if (value === undefined) return [{ loc, msg: 'Field required', type: 'missing' }];
  if (typeof value !== 'string') {
    return [{ loc, msg: 'Input should be a valid string', type: 'string_type' }];
  }
  if (value.length < 2) {
    return [{ loc, msg: 'String should have at least 2 characters', type: 'string_too_short' }];
  }
  if (value.length > 100) {
    return [{ loc, msg: 'String should have at most 100 characters', type: 'string_too_long' }];
  }
  if (!consumerIdPattern.test(value)) {
    return [
      {
        loc,
        msg: "String should match pattern '^[a-zA-Z0-9_-]+$'",
        type: 'string_pattern_mismatch',
      },
    ];
  }
  return [];
}

export function rewardIdErrors(value: string): ErrorItem[] {
  if (uuidPattern.test(value)) return [];
  return [
    { loc: ['path', 'reward_id'], msg: 'Input should be a valid UUID', type: 'uuid_parsing' },
  ];
}

/** Validates an enrollment body (already parsed JSON). Returns the id when valid. */
export function validateEnrollment(
  body: unknown,
): { ok: true; id: string } | { ok: false; errors: ErrorItem[] } {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    return {
      ok: false,
      errors: [{ loc: ['body'], msg: 'Input should be a valid object', type: 'model_type' }],
    };
  }
  const fields = body as Record<string, unknown>;
  const errors = consumerIdErrors(fields.id, ['body', 'id']);
  for (const key of ['extra_consents', 'removed_consents'] as const) {
    errors.push(...consentListErrors(fields[key], key));
  }
  if (errors.length > 0) return { ok: false, errors };
  return { ok: true, id: fields.id as string };
}

function consentListErrors(value: unknown, key: string): ErrorItem[] {
  // Optional: the spec does not say these lists are required, so absent or null is fine.
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) {
    return [{ loc: ['body', key], msg: 'Input should be a valid list', type: 'list_type' }];
  }
  const errors: ErrorItem[] = [];
  value.forEach((item, index) => {
    if (!(consents as readonly unknown[]).includes(item)) {
      errors.push({
        loc: ['body', key, index],
        msg: `Input should be ${consents.map((c) => `'${c}'`).join(', ')}`,
        type: 'enum',
      });
    }
  });
  return errors;
}

export interface RewardListQuery {
  page: number;
  perPage: number;
  sort: RewardSort;
  types: string[];
}

/** Parses page, per_page, sort and type; unknown parameters are ignored. */
export function parseRewardListQuery(
  params: URLSearchParams,
): { ok: true; query: RewardListQuery } | { ok: false; errors: ErrorItem[] } {
  const errors: ErrorItem[] = [];
  const page = integerParam(params, 'page', 1, 1, undefined, errors);
  const perPage = integerParam(params, 'per_page', 50, 1, 1000, errors);
  const sortValue = params.get('sort');
  let sort: RewardSort = defaultRewardSort;
  if (sortValue !== null) {
    if ((rewardSorts as readonly string[]).includes(sortValue)) {
      sort = sortValue as RewardSort;
    } else {
      errors.push({
        loc: ['query', 'sort'],
        msg: `Input should be ${rewardSorts.map((s) => `'${s}'`).join(', ')}`,
        type: 'enum',
      });
    }
  }
  const types = params.getAll('type').filter((t) => t !== '');
  if (errors.length > 0) return { ok: false, errors };
  return { ok: true, query: { page, perPage, sort, types } };
}

function integerParam(
  params: URLSearchParams,
  name: string,
  fallback: number,
  min: number,
  max: number | undefined,
  errors: ErrorItem[],
): number {
  const raw = params.get(name);
  if (raw === null) return fallback;
  const loc = ['query', name];
  if (!/^[+-]?\d+$/.test(raw.trim())) {
    errors.push({
      loc,
      msg: 'Input should be a valid integer, unable to parse string as an integer',
      type: 'int_parsing',
    });
    return fallback;
  }
  const value = Number(raw);
  if (value < min) {
    errors.push({
      loc,
      msg: `Input should be greater than or equal to ${min}`,
      type: 'greater_than_equal',
    });
  } else if (max !== undefined && value > max) {
    errors.push({
      loc,
      msg: `Input should be less than or equal to ${max}`,
      type: 'less_than_equal',
    });
  }
  return value;
}
