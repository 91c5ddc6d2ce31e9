/**
 * @deprecated What src/cli/enroll-report.ts and enroll-file.ts called before every door took the
 * one signup check: they should call checkSignup (intake/signups.ts) with describeProblems, and
 * enqueueEnrollments (producer.ts). Delete this file then.
 */
import { checkSignup } from '../intake/signups.js';
import type { EnrollmentPayload } from './payloads.js';

export { enqueueEnrollments } from './producer.js';
export type ValidEnrollment = EnrollmentPayload;

export function checkEnrollment(signup: unknown, consumerIdKey: string | undefined) {
  const checked = checkSignup(signup, consumerIdKey);
  if (checked.ok) return { ok: true as const, enrollment: checked.value };
  const problems = checked.problems.map(({ field, message }) => ({ path: [field], message }));
  return { ok: false as const, problems };
}
