/**
 * What `enroll --file` says: a record checked into an enrollment or one line naming the field
 * at fault, the tally of the enqueueing, and the summary of the jobs followed with --wait.
 */
import { checkEnrollment, type ValidEnrollment } from '../queues/bulk-enroll.js';
import { describeOutcomes, type EnrollmentOutcomes } from './enroll-follow.js';
import { type InputRecord, inputPath } from './enroll-input.js';

/**
 * Records read (blank lines are not records): `enqueued` as new jobs, already `pending` (an
 * earlier run, a signup: no second job), `duplicates` of a consumer read earlier in the same
 * input (enqueued once), and `bad` ones (reported on stderr and skipped).
 */
export interface EnrollmentTally {
  records: number;
  enqueued: number;
  pending: number;
  duplicates: number;
  bad: number;
}

export type CheckedRecord =
  | { ok: true; enrollment: ValidEnrollment }
  | { ok: false; problem: string };

/** The enrollment payload schema's own messages, each under the input's name of its field. */
export function checkRecord(record: InputRecord, consumerIdKey: string | undefined): CheckedRecord {
  if ('problem' in record) return { ok: false, problem: record.problem };
  const checked = checkEnrollment(record.payload, consumerIdKey);
  if (checked.ok) return checked;
  const problem = checked.problems
    .map(({ path, message }) => `${inputPath(path)}: ${message}`)
    .join('; ');
  return { ok: false, problem };
}

export const tallyDetail = (t: EnrollmentTally) =>
  `enqueued ${t.enqueued}, already pending ${t.pending}, duplicates ${t.duplicates}, bad ${t.bad}`;

export const tallyLine = (t: EnrollmentTally) => `read ${t.records} records: ${tallyDetail(t)}`;

/** Reasons shown one by one; the rest are summed on one line. */
const reasonsShown = 10;

export function followSummary(outcomes: EnrollmentOutcomes, followed: number): string[] {
  const lines =
    outcomes.pending > 0
      ? [
          `stopped following: ${followed - outcomes.pending} of ${followed} enrollments ended (${describeOutcomes(outcomes)}), ${outcomes.pending} still pending; they go on in the worker`,
        ]
      : [`followed ${followed} enrollments: ${describeOutcomes(outcomes)}`];
  if (outcomes.failures.size > 0) {
    const reasons = [...outcomes.failures].sort((a, b) => b[1] - a[1]);
    const width = String(reasons[0]?.[1] ?? 0).length;
    lines.push(`failed ${outcomes.failed}, by reason:`);
    for (const [reason, count] of reasons.slice(0, reasonsShown)) {
      lines.push(`  ${String(count).padStart(width)}  ${reason}`);
    }
    const rest = reasons.slice(reasonsShown);
    if (rest.length > 0) {
      const jobs = rest.reduce((sum, [, count]) => sum + count, 0);
      lines.push(`  ${String(jobs).padStart(width)}  (${rest.length} other reasons)`);
    }
    lines.push("each failed job is listed by 'perks-worker failed' and can be retried there");
  }
  return lines;
}

export function printFollowSummary(outcomes: EnrollmentOutcomes, followed: number): void {
  process.stdout.write(`${followSummary(outcomes, followed).join('\n')}\n`);
}
