/** The spec's field errors, pydantic-style (`loc`, msg, type), by the client's own rules. */
import { z } from 'zod';
import { consentSchema, consumerIdSchema, perPageSchema, uuidSchema } from '../perks/schemas.js';
import type { ParsedBody } from './api.js';
import { defaultRewardSort, type RewardPageQuery, rewardSorts } from './consumer-rewards.js';
import type { ErrorItem } from './reply.js';

type Loc = (string | number)[];
type Checked<T> = { ok: true; value: T } | { ok: false; errors: ErrorItem[] };

const enrollmentSchema = z.object({
  id: consumerIdSchema,
  extra_consents: z.array(consentSchema).nullish(),
  removed_consents: z.array(consentSchema).nullish(),
});

const integerParam = z.string().transform((raw, ctx) => {
  if (/^[+-]?\d+$/.test(raw.trim())) return Number(raw);
  const params = { type: 'int_parsing' };
  ctx.addIssue({ code: 'custom', message: 'must be a whole number', params });
  return z.NEVER;
});

const pathSchema = z.object({ consumer_id: consumerIdSchema, reward_id: uuidSchema.optional() });

const rewardListSchema = z.object({
  path: pathSchema,
  query: z.object({
    page: integerParam.pipe(z.number().min(1)).default(1),
    per_page: integerParam.pipe(perPageSchema).default(50),
    sort: z.enum(rewardSorts).default(defaultRewardSort),
  }),
});

export function validateEnrollment(body: ParsedBody): Checked<string> {
  // The spec: an empty errors means the body was not valid JSON.
  if (body.kind === 'malformed') return { ok: false, errors: [] };
  const value = body.kind === 'json' ? body.value : body.kind === 'form' ? null : undefined;
  // The spec: loc "is a path from the request body", so no pydantic 'body' segment first.
  const checked = check(enrollmentSchema, value, []);
  return checked.ok ? { ok: true, value: checked.value.id } : checked;
}

export function rewardPathErrors(consumerId: string, rewardId: string): ErrorItem[] {
  const checked = check(pathSchema, { consumer_id: consumerId, reward_id: rewardId }, ['path']);
  return checked.ok ? [] : checked.errors;
}

/** Unknown query parameters are ignored. */
export function validateRewardList(
  consumerId: string,
  params: URLSearchParams,
): Checked<RewardPageQuery> {
  const named = (name: string) => params.get(name) ?? undefined;
  const query = { page: named('page'), per_page: named('per_page'), sort: named('sort') };
  const checked = check(rewardListSchema, { path: { consumer_id: consumerId }, query }, []);
  if (!checked.ok) return checked;
  const { page, per_page: perPage, sort } = checked.value.query;
  const types = params.getAll('type').filter((t) => t !== '');
  return { ok: true, value: { page, perPage, sort, types } };
}

function check<T>(schema: z.ZodType<T>, value: unknown, loc: Loc): Checked<T> {
  const result = schema.safeParse(value, { reportInput: true });
  if (result.success) return { ok: true, value: result.data };
  const errors: ErrorItem[] = [];
  for (const issue of result.error.issues) {
    const at = [...loc, ...(issue.path as Loc)];
    // One error per field, as pydantic reports it.
    if (errors.some((e) => JSON.stringify(e.loc) === JSON.stringify(at))) continue;
    errors.push({ loc: at, msg: issue.message, type: pydanticType(issue) });
  }
  return { ok: false, errors };
}

const pydanticTypeNames: Record<string, string> = { array: 'list', object: 'model' };

function pydanticType(issue: z.core.$ZodIssue): string {
  switch (issue.code) {
    case 'invalid_type':
      if (issue.input === undefined) return 'missing';
      return `${pydanticTypeNames[issue.expected] ?? issue.expected}_type`;
    case 'too_small':
      return issue.origin === 'string' ? 'string_too_short' : 'greater_than_equal';
    case 'too_big':
      return issue.origin === 'string' ? 'string_too_long' : 'less_than_equal';
    case 'invalid_format':
      return issue.format === 'regex' ? 'string_pattern_mismatch' : 'uuid_parsing';
    case 'invalid_value':
      return 'enum';
    case 'custom':
      return String(issue.params?.type ?? 'value_error');
    default:
      return 'value_error';
  }
}
