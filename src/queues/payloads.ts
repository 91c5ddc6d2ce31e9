/**
 * Job payload contracts. Producers validate before enqueueing; processors validate again,
 * because jobs can be added by anything that speaks to Redis. A payload that fails here
 * fails its job at once (UnrecoverableError) with a reason naming the field.
 */

import { z } from 'zod';
import { formatPath } from '../perks/paging.js';
import { consentSchema, consumerIdSchema } from '../perks/schemas.js';
import { maxConsumersPerSyncJob } from './names.js';

/** The client's own customer id: any non-empty string of sane length. */
const userIdSchema = z
  .string({ error: 'must be a string' })
  .min(1, { error: 'must not be empty' })
  .max(256, { error: 'must be at most 256 characters' });

const consentsSchema = z.array(consentSchema).max(16).optional();

export const enrollmentPayloadSchema = z
  .strictObject({
    userId: userIdSchema.optional(),
    consumerId: consumerIdSchema.optional(),
    extraConsents: consentsSchema,
    removedConsents: consentsSchema,
  })
  .refine((p) => p.userId !== undefined || p.consumerId !== undefined, {
    error: 'one of userId or consumerId is required',
    path: ['userId'],
  });
export type EnrollmentPayload = z.infer<typeof enrollmentPayloadSchema>;

export const rewardSyncPayloadSchema = z.strictObject({
  consumerId: consumerIdSchema,
  /** Why the sync was asked for: shown in logs and `status`. */
  reason: z.enum(['enrollment', 'manual', 'reconciliation']).optional(),
});
export type RewardSyncPayload = z.infer<typeof rewardSyncPayloadSchema>;

/** A sync job of several consumers (a reconciliation's fan-out): each is synced as if alone. */
export const rewardSyncBatchPayloadSchema = z.strictObject({
  consumerIds: z
    .array(consumerIdSchema)
    .min(1, { error: 'must not be empty' })
    .max(maxConsumersPerSyncJob, {
      error: `must hold at most ${maxConsumersPerSyncJob} consumer ids`,
    })
    .refine((ids) => new Set(ids).size === ids.length, { error: 'must not repeat a consumer id' }),
  reason: rewardSyncPayloadSchema.shape.reason,
});
export type RewardSyncBatchPayload = z.infer<typeof rewardSyncBatchPayloadSchema>;

export const reconciliationPayloadSchema = z.strictObject({
  trigger: z.enum(['manual', 'schedule']).default('manual'),
  /** Last consumer id enqueued: a reconciliation resumes after it when retried or recovered. */
  cursor: consumerIdSchema.nullable().default(null),
  enqueued: z.number().int().nonnegative().default(0),
  startedAt: z.iso.datetime().optional(),
});
export type ReconciliationPayload = z.input<typeof reconciliationPayloadSchema>;
export type ReconciliationState = z.output<typeof reconciliationPayloadSchema>;

/** Thrown by `parsePayload`: one line naming each bad field. */
export class InvalidPayloadError extends Error {
  override readonly name = 'InvalidPayloadError';
}

/** Validates a job payload; the message names every offending field, e.g. `extraConsents[1]`. */
export function parsePayload<S extends z.ZodType>(
  schema: S,
  data: unknown,
  what: string,
): z.output<S> {
  const parsed = schema.safeParse(data);
  if (parsed.success) return parsed.data;
  const problems = parsed.error.issues.map(
    (issue) => `${formatPath(issue.path) || '(payload)'}: ${issue.message}`,
  );
  throw new InvalidPayloadError(`invalid ${what} payload: ${problems.join('; ')}`);
}
