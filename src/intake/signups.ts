/**
 * What the three intake paths (HTTP, the outbox table, RabbitMQ) share: the wire shape of a
 * signup, its check with problems naming the field, and the enqueue, which is the producer's
 * own: the same consumer ids and the same deduplication of a pending enrollment.
 *
 * The wire shape is snake_case JSON, as most of the client's systems write it:
 *   {"user_id": "customer-8812", "extra_consents": ["TARGETING"], "removed_consents": []}
 * Unknown fields are refused: a misspelt consent list must not be dropped in silence.
 */
import { type ZodError, z } from 'zod';
import type { Consent } from '../perks/schemas.js';
import { consumerIdSchema } from '../perks/schemas.js';
import { ConsumerIdKeyMissingError, deriveConsumerId } from '../queues/consumer-id.js';
import { consentsSchema, userIdSchema } from '../queues/payloads.js';
import { enqueueEnrollment, enqueueRewardSync } from '../queues/producer.js';
import type { Queues } from '../queues/queues.js';

/** The most items one HTTP request may carry. */
export const maxItemsPerRequest = 1000;

const signupSchema = z.strictObject({
  user_id: userIdSchema,
  // null as absent: the outbox's array columns are null when not given.
  extra_consents: consentsSchema.nullable(),
  removed_consents: consentsSchema.nullable(),
});

const syncRequestSchema = z.strictObject({ consumer_id: consumerIdSchema });

/** One thing wrong with one item: `field` as sent (`extra_consents[1]`), `index` in the request. */
export interface SignupProblem {
  index: number;
  field: string;
  message: string;
}

export interface Signup {
  userId: string;
  consumerId: string;
  extraConsents?: Consent[];
  removedConsents?: Consent[];
}

export type Checked<T> = { ok: true; value: T } | { ok: false; problems: SignupProblem[] };

/** Checks one signup and derives its consumer id (PERKS_CONSUMER_ID_KEY when it must be). */
export function checkSignup(
  value: unknown,
  consumerIdKey: string | undefined,
  index = 0,
): Checked<Signup> {
  const parsed = signupSchema.safeParse(value);
  if (!parsed.success) return { ok: false, problems: problemsOf(parsed.error, index) };
  const { user_id: userId, extra_consents, removed_consents } = parsed.data;
  try {
    const consumerId = deriveConsumerId(userId, consumerIdKey, 'user_id');
    return {
      ok: true,
      value: {
        userId,
        consumerId,
        ...(extra_consents ? { extraConsents: extra_consents } : {}),
        ...(removed_consents ? { removedConsents: removed_consents } : {}),
      },
    };
  } catch (error) {
    if (!(error instanceof ConsumerIdKeyMissingError)) throw error;
    return {
      ok: false,
      problems: [{ index, field: 'user_id', message: ConsumerIdKeyMissingError.problem }],
    };
  }
}

/** Checks one sync request, `{"consumer_id": "..."}`. */
export function checkSyncRequest(value: unknown, index = 0): Checked<string> {
  const parsed = syncRequestSchema.safeParse(value);
  if (!parsed.success) return { ok: false, problems: problemsOf(parsed.error, index) };
  return { ok: true, value: parsed.data.consumer_id };
}

/** Checks every item; the values only when all of them are valid, else every problem. */
export function checkAll<T>(
  items: readonly unknown[],
  check: (item: unknown, index: number) => Checked<T>,
): Checked<T[]> {
  const values: T[] = [];
  const problems: SignupProblem[] = [];
  items.forEach((item, index) => {
    const checked = check(item, index);
    if (checked.ok) values.push(checked.value);
    else problems.push(...checked.problems);
  });
  return problems.length > 0 ? { ok: false, problems } : { ok: true, value: values };
}

export interface AcceptedSignup {
  userId: string;
  consumerId: string;
  jobId: string;
  /** An enrollment of this consumer was already pending: no job was added. */
  duplicate: boolean;
}

/** Enqueues checked signups, in order; rejects when Redis does (nothing is then claimed). */
export async function enqueueSignups(
  queues: Queues,
  signups: readonly Signup[],
): Promise<AcceptedSignup[]> {
  return Promise.all(
    signups.map(async (signup) => {
      const { jobId, alreadyPending } = await enqueueEnrollment(queues, signup, undefined);
      return {
        userId: signup.userId,
        consumerId: signup.consumerId,
        jobId,
        duplicate: alreadyPending,
      };
    }),
  );
}

/** Enqueues one manual sync per consumer; a sync already waiting absorbs the request. */
export async function enqueueSyncs(
  queues: Queues,
  consumerIds: readonly string[],
): Promise<{ consumerId: string; jobId: string }[]> {
  return Promise.all(
    consumerIds.map(async (consumerId) => {
      const job = await enqueueRewardSync(queues, { consumerId, reason: 'manual' });
      return { consumerId, jobId: job.id ?? '' };
    }),
  );
}

function problemsOf(error: ZodError, index: number): SignupProblem[] {
  return error.issues.map((issue) => {
    if (issue.code === 'unrecognized_keys') {
      return { index, field: issue.keys.join(', '), message: 'is not a known field' };
    }
    const field = issue.path
      .map((part, i) =>
        typeof part === 'number' ? `[${part}]` : `${i > 0 ? '.' : ''}${String(part)}`,
      )
      .join('');
    return {
      index,
      field: field || '(item)',
      message:
        field === '' && issue.code === 'invalid_type' ? 'must be a JSON object' : issue.message,
    };
  });
}
