/**
 * The signup every door takes (HTTP, RabbitMQ, the outbox, `enroll`), in snake_case JSON:
 *   {"user_id": "customer-8812", "extra_consents": ["TARGETING"], "removed_consents": []}
 * checked into an enrollment payload, its consumer id derived once. Unknown fields are refused:
 * a misspelt consent list must not be dropped in silence.
 */
import { z } from 'zod';
import type { Logger } from '../ops/logger.js';
import type { IntakeMetrics } from '../ops/metrics.js';
import type { ContinueTrace } from '../ops/tracing.js';
import { consumerIdSchema } from '../perks/schemas.js';
import { ConsumerIdKeyMissingError, deriveConsumerId } from '../queues/consumer-id.js';
import {
  consentsApart,
  consentsSchema,
  type EnrollmentPayload,
  type Problem,
  problemsOf,
  userIdSchema,
} from '../queues/payloads.js';
import type { Queues } from '../queues/queues.js';

/** What each door is given; its queues on a fail-fast connection: a caller learns at once. */
export interface Door {
  queues: Queues;
  /** PERKS_CONSUMER_ID_KEY: a user id that needs it waits while it is unset (onlyKeyMissing). */
  consumerIdKey: string | undefined;
  logger: Logger;
  metrics: IntakeMetrics;
  /** With tracing on: HTTP and AMQP jobs continue the trace of the `traceparent` header. */
  continueTrace?: ContinueTrace;
}

export const signupSchema = z
  .strictObject({
    user_id: userIdSchema,
    // null as absent: the outbox's array columns are null when not given.
    extra_consents: consentsSchema.nullable(),
    removed_consents: consentsSchema.nullable(),
  })
  .superRefine(consentsApart('extra_consents', 'removed_consents'));

/** The fields of a signup, for the CSV header of `enroll --file`. */
export const signupFields = Object.keys(signupSchema.shape);

const syncRequestSchema = z
  .strictObject({ consumer_id: consumerIdSchema })
  .transform((request) => request.consumer_id);

export type Checked<T> = { ok: true; value: T } | { ok: false; problems: Problem[] };

function parse<T>(schema: z.ZodType<T>, value: unknown): Checked<T> {
  const parsed = schema.safeParse(value);
  if (parsed.success) return { ok: true, value: parsed.data };
  return { ok: false, problems: problemsOf(parsed.error, '(item)') };
}

/** Checks one signup into its enrollment payload (PERKS_CONSUMER_ID_KEY when it must derive). */
export function checkSignup(
  value: unknown,
  consumerIdKey: string | undefined,
): Checked<EnrollmentPayload> {
  const parsed = parse(signupSchema, value);
  if (!parsed.ok) return parsed;
  const { user_id: userId, extra_consents, removed_consents } = parsed.value;
  try {
    const consumerId = deriveConsumerId(userId, consumerIdKey, 'user_id');
    // undefined rather than null: the job's JSON then leaves the field out.
    const consents = {
      extraConsents: extra_consents ?? undefined,
      removedConsents: removed_consents ?? undefined,
    };
    return { ok: true, value: { userId, consumerId, ...consents } };
  } catch (error) {
    if (!(error instanceof ConsumerIdKeyMissingError)) throw error;
    const problem = { field: error.field, message: ConsumerIdKeyMissingError.problem };
    return { ok: false, problems: [problem] };
  }
}

/**
 * Every problem is this replica's missing PERKS_CONSUMER_ID_KEY: its configuration, not the
 * signup, is at fault, so no door refuses it (HTTP 503, AMQP requeue, the outbox leaves it).
 */
export const onlyKeyMissing = (problems: readonly Problem[]): boolean =>
  problems.length > 0 && problems.every((p) => p.message === ConsumerIdKeyMissingError.problem);

/** Checks one sync request, `{"consumer_id": "..."}`, into its consumer id. */
export const checkSyncRequest = (value: unknown): Checked<string> =>
  parse(syncRequestSchema, value);

/** Checks every item: all the values, or every problem with the index of its item. */
export function checkAll<T>(
  items: readonly unknown[],
  check: (item: unknown) => Checked<T>,
): { ok: true; value: T[] } | { ok: false; problems: (Problem & { index: number })[] } {
  const values: T[] = [];
  const problems: (Problem & { index: number })[] = [];
  items.forEach((item, index) => {
    const checked = check(item);
    if (checked.ok) values.push(checked.value);
    else problems.push(...checked.problems.map((problem) => ({ index, ...problem })));
  });
  return problems.length > 0 ? { ok: false, problems } : { ok: true, value: values };
}
