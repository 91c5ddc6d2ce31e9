/**
 * Job payload contracts, checked by producers and again by processors (anything that speaks to
 * Redis can add a job): a bad payload fails its job at once, with a reason naming the field.
 */
import type { Job } from 'bullmq';
import { type ZodError, z } from 'zod';
import { InputError } from '../errors.js';
import { consentSchema, consumerIdSchema, storable, UNSTORABLE_MESSAGE } from '../perks/schemas.js';
import { jobNames, maxConsumersPerSyncJob } from './names.js';

/** One thing wrong with an input: the field as its sender names it (`extra_consents[1]`), and why. */
export type Problem = { field: string; message: string };

/** Every issue of a failed parse as a Problem; `whole` names the input when it is not an object. */
export function problemsOf(error: ZodError, whole = '(payload)'): Problem[] {
  return error.issues.map((issue) => {
    if (issue.code === 'unrecognized_keys') {
      // Named, but never echoed whole: a payload's keys are anyone's (10 kB, or thousands).
      const named = issue.keys.slice(0, 5).map((key) => key.slice(0, 50));
      const more = issue.keys.length > 5 ? ` (+${issue.keys.length - 5} more)` : '';
      return { field: `${named.join(', ')}${more}`, message: 'is not a known field' };
    }
    const field = z.core.toDotPath(issue.path);
    if (field !== '') return { field, message: issue.message };
    const notObject = issue.code === 'invalid_type';
    return { field: whole, message: notObject ? 'must be a JSON object' : issue.message };
  });
}

/** `field: message; field: message`, the one way a list of problems is written. */
export function describeProblems(problems: readonly Problem[]): string {
  return problems.map(({ field, message }) => `${field}: ${message}`).join('; ');
}

/** The client's own customer id: any non-empty string of sane length. */
export const userIdSchema = z
  .string({ error: (issue) => (issue.input === undefined ? 'is required' : 'must be a string') })
  .min(1, { error: 'must not be empty' })
  .max(256, { error: 'must be at most 256 characters' })
  .refine(storable, { error: UNSTORABLE_MESSAGE })
  // U+FFFD is what a lenient decoder (fastify's, the AMQP client's) makes of bytes that are not
  // UTF-8: two customers' ids could then derive one consumer id.
  .refine((id) => !id.includes('\uFFFD'), {
    error: 'must not contain U+FFFD (bytes that were not UTF-8 decode to it)',
  });

export const consentsSchema = z.array(consentSchema).max(16).optional();

/** A consent both added and removed can never be enrolled: refused at once, the consent named. */
export const consentsApart =
  <E extends string, R extends string>(extra: E, removed: R) =>
  (value: Partial<Record<E | R, readonly string[] | null>>, ctx: z.RefinementCtx) => {
    const both = value[removed]?.find((consent) => value[extra]?.includes(consent));
    const message = `${both} is also an extra consent`;
    if (both) ctx.addIssue({ code: 'custom', path: [removed], message });
  };

const enrollmentFields = {
  userId: userIdSchema.optional(),
  consumerId: consumerIdSchema.optional(),
  extraConsents: consentsSchema,
  removedConsents: consentsSchema,
};

/** What the producer API is given: a user id (its consumer id then derived) or a consumer id. */
export const enrollmentRequestSchema = z
  .strictObject(enrollmentFields)
  .refine((p) => p.userId !== undefined || p.consumerId !== undefined, {
    error: 'one of userId or consumerId is required',
    path: ['userId'],
  })
  .superRefine(consentsApart('extraConsents', 'removedConsents'));
export type EnrollmentRequest = z.infer<typeof enrollmentRequestSchema>;

/** An enrollment job: its consumer id derived once, by whoever enqueued it. */
export const enrollmentPayloadSchema = z
  .strictObject({ ...enrollmentFields, consumerId: consumerIdSchema })
  .superRefine(consentsApart('extraConsents', 'removedConsents'));
export type EnrollmentPayload = z.infer<typeof enrollmentPayloadSchema>;

export const rewardSyncPayloadSchema = z.strictObject({
  consumerId: consumerIdSchema,
  /** Why the sync was asked for: shown in logs and `status`. */
  reason: z.enum(['enrollment', 'manual', 'reconciliation']).optional(),
  /** The reconciliation (its job id) whose tally counts this sync's outcome. */
  reconciliation: z.string().min(1).max(200).optional(),
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
  reconciliation: rewardSyncPayloadSchema.shape.reconciliation,
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

/** Each job name's payload schema: a `PerksJob<N>` is typed by it, and still parsed. */
export const jobPayloadSchemas = {
  [jobNames.enroll]: enrollmentPayloadSchema,
  [jobNames.syncRewards]: rewardSyncPayloadSchema,
  [jobNames.syncRewardsBatch]: rewardSyncBatchPayloadSchema,
  [jobNames.reconcile]: reconciliationPayloadSchema,
  // The cron scheduler's tick carries nothing: it only starts a reconciliation.
  [jobNames.reconcileTick]: z.strictObject({}),
  // The pruning reads its retention from the config of the replica that runs it.
  [jobNames.pruneEvents]: z.strictObject({}),
} as const;

export type JobName = keyof typeof jobPayloadSchemas;
/** A BullMQ job of one name, its data typed by that name. */
export type PerksJob<N extends JobName> = Job<z.input<(typeof jobPayloadSchemas)[N]>, unknown, N>;

/** Thrown by `parsePayload`: one line naming each bad field. */
export class InvalidPayloadError extends InputError {
  override readonly name = 'InvalidPayloadError';
}

/** Validates a job payload; an InvalidPayloadError names every offending field. */
export function parsePayload<S extends z.ZodType>(
  schema: S,
  data: unknown,
  what: string,
): z.output<S> {
  const parsed = schema.safeParse(data);
  if (parsed.success) return parsed.data;
  const problems = describeProblems(problemsOf(parsed.error));
  throw new InvalidPayloadError(`invalid ${what} payload: ${problems}`);
}
