/**
 * Many enrollments in one round trip: `addBulk` pipelines the same per-job script as `add`,
 * and that script applies each job's deduplication id, so a consumer whose enrollment is
 * pending gets no second job and the answer carries the pending job's id, exactly as with
 * `enqueueEnrollment`. Duplicates inside one call are the caller's to drop: the second would be
 * answered as pending, by the first.
 */
import { ConsumerIdKeyMissingError } from './consumer-id.js';
import { type EnrollmentPayload, enrollmentPayloadSchema } from './payloads.js';
import {
  type EnqueuedEnrollment,
  enqueuedAs,
  enrollmentConsumerId,
  enrollmentJob,
} from './producer.js';
import type { Queues } from './queues.js';

/** A payload that passed the enrollment schema, with its consumer id derived. */
export interface ValidEnrollment {
  consumerId: string;
  data: EnrollmentPayload & { consumerId: string };
}

/** One problem of a payload: the field's path in the payload (`['extraConsents', 1]`) and why. */
export interface PayloadProblem {
  path: readonly PropertyKey[];
  message: string;
}

export type CheckedEnrollment =
  | { ok: true; enrollment: ValidEnrollment }
  | { ok: false; problems: PayloadProblem[] };

/**
 * Validates an enrollment payload and derives its consumer id, as `enqueueEnrollment` does,
 * but answers the problems instead of throwing: a bulk caller reports them per record.
 */
export function checkEnrollment(
  payload: unknown,
  consumerIdKey: string | undefined,
): CheckedEnrollment {
  const parsed = enrollmentPayloadSchema.safeParse(payload);
  if (!parsed.success) {
    return {
      ok: false,
      problems: parsed.error.issues.map((issue) => ({ path: issue.path, message: issue.message })),
    };
  }
  const valid = parsed.data;
  try {
    const consumerId = enrollmentConsumerId(valid, consumerIdKey);
    return { ok: true, enrollment: { consumerId, data: { ...valid, consumerId } } };
  } catch (error) {
    if (!(error instanceof ConsumerIdKeyMissingError)) throw error;
    return {
      ok: false,
      problems: [{ path: ['userId'], message: ConsumerIdKeyMissingError.problem }],
    };
  }
}

/** Enqueues checked enrollments in one pipeline; the answers are in the same order. */
export async function enqueueEnrollments(
  queues: Queues,
  enrollments: readonly ValidEnrollment[],
): Promise<EnqueuedEnrollment[]> {
  if (enrollments.length === 0) return [];
  const jobs = enrollments.map(({ consumerId, data }) => enrollmentJob(consumerId, data));
  const added = await queues.enrollment.addBulk(jobs);
  return added.map((job, i) => {
    const { data, opts } = jobs[i] as (typeof jobs)[number];
    return enqueuedAs(data.consumerId, opts.jobId, job);
  });
}
