/**
 * Many enrollments in one round trip: `addBulk` pipelines the same per-job script as `add`,
 * and that script applies each job's deduplication id, so a consumer whose enrollment is
 * pending gets no second job and the answer carries the pending job's id, exactly as with
 * `enqueueEnrollment`. Duplicates inside one call are the caller's to drop: the second would be
 * answered as pending, by the first.
 */
import { ConsumerIdKeyMissingError, deriveConsumerId } from './consumer-id.js';
import { enrollmentDeduplicationId, enrollmentJobId, jobNames } from './names.js';
import { type EnrollmentPayload, enrollmentPayloadSchema } from './payloads.js';
import type { EnqueuedEnrollment } from './producer.js';
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
    const consumerId = valid.consumerId ?? deriveConsumerId(valid.userId ?? '', consumerIdKey);
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
  const jobIds = enrollments.map(({ consumerId }) => enrollmentJobId(consumerId));
  const jobs = await queues.enrollment.addBulk(
    enrollments.map(({ consumerId, data }, i) => ({
      name: jobNames.enroll,
      data,
      opts: { jobId: jobIds[i], deduplication: { id: enrollmentDeduplicationId(consumerId) } },
    })),
  );
  return jobs.map((job, i) => {
    const jobId = jobIds[i] ?? '';
    // A deduplicated add answers with the pending job's id.
    return {
      consumerId: enrollments[i]?.consumerId ?? '',
      jobId: job.id ?? jobId,
      alreadyPending: job.id !== jobId,
    };
  });
}
