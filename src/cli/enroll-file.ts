/**
 * `perks-worker enroll --file <path|->`: enqueues the records `batchSize` at a time with the
 * single enrollment's deduplication, reports bad lines on stderr as they come, and with
 * `--wait` follows the jobs to their end. A rerun does no harm: a consumer whose enrollment is
 * pending gets no second job, and one enrolled meanwhile is answered 409 (already enrolled).
 */
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import type { Readable } from 'node:stream';
import { OperationalError, UsageError } from '../errors.js';
import { checkSignup } from '../intake/signups.js';
import { describeProblems, type EnrollmentPayload } from '../queues/payloads.js';
import { enqueueEnrollments } from '../queues/producer.js';
import type { Queues } from '../queues/queues.js';
import { EnrollmentFollower, followSummary } from './enroll-follow.js';
import {
  EnrollmentInputError,
  formatOfPath,
  type InputRecord,
  readRecords,
  sniffFormat,
} from './enroll-input.js';
import { withProducer } from './producer-session.js';
import { createProgress } from './progress.js';

const batchSize = 1000;

/** `file`: a path or `-` (stdin). Without `format` or a known extension, the first character tells. */
export async function enrollFromFile(
  file: string,
  format = formatOfPath(file),
  wait = false,
): Promise<number> {
  const { input, lines } = await openInput(file);
  format ??= await sniffFormat(input);
  const interrupted = new AbortController();
  const stop = () => interrupted.abort();
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  try {
    return await withProducer(async ({ queues, connection }, config) => {
      const follower = wait
        ? await EnrollmentFollower.start(queues.enrollment, connection)
        : undefined;
      const records = readRecords(input, format);
      const context = { consumerIdKey: config.consumerIds.key, lines, follower };
      const tally = await enqueueRecords(queues, records, context, interrupted.signal);
      if (tally.records === 0 && !interrupted.signal.aborted) {
        const what = file === '-' ? 'stdin' : file;
        throw new OperationalError(`enroll: ${what} holds no records (empty, or a header alone)`);
      }
      const noun = tally.records === 1 ? 'record' : 'records';
      process.stdout.write(`read ${tally.records} ${noun}: ${tallyDetail(tally)}\n`);
      if (interrupted.signal.aborted) {
        process.stderr.write(
          'interrupted: run the same command again to enqueue the rest; what is pending is not enqueued twice\n',
        );
        return 130;
      }
      if (!follower) return tally.bad === 0 ? 0 : 1;
      const outcomes = await follower.untilDone(createProgress('following'), interrupted.signal);
      process.stdout.write(`${followSummary(outcomes, follower.followed).join('\n')}\n`);
      if (outcomes.pending > 0) return 130;
      return tally.bad + outcomes.failed + outcomes.unknown === 0 ? 0 : 1;
    });
  } catch (error) {
    if (error instanceof EnrollmentInputError) throw new UsageError(`enroll: ${error.message}`);
    throw error;
  } finally {
    process.off('SIGINT', stop);
    process.off('SIGTERM', stop);
    input.destroy();
  }
}

/**
 * Records read (blank lines are not records): `enqueued` as new jobs, already `pending` (an
 * earlier run, a signup: no second job), `duplicates` of a consumer read earlier in the same
 * input (enqueued once), and `bad` ones (reported on stderr and skipped).
 */
type Tally = Record<'records' | 'enqueued' | 'pending' | 'duplicates' | 'bad', number>;

const tallyDetail = (t: Tally) =>
  `enqueued ${t.enqueued}, already pending ${t.pending}, duplicates ${t.duplicates}, bad ${t.bad}`;

/** A record checked as every signup is, or one line naming each field at fault. */
export function checkRecord(
  record: InputRecord,
  consumerIdKey: string | undefined,
): { ok: true; enrollment: EnrollmentPayload } | { ok: false; problem: string } {
  if ('problem' in record) return { ok: false, problem: record.problem };
  const checked = checkSignup(record.payload, consumerIdKey);
  if (checked.ok) return { ok: true, enrollment: checked.value };
  return { ok: false, problem: describeProblems(checked.problems) };
}

async function enqueueRecords(
  queues: Queues,
  records: AsyncIterable<InputRecord>,
  context: {
    consumerIdKey: string | undefined;
    /** Of the input when known (a file): what is left of it estimates the records to come. */
    lines: number | undefined;
    follower: EnrollmentFollower | undefined;
  },
  signal: AbortSignal,
): Promise<Tally> {
  const { consumerIdKey, follower } = context;
  const tally: Tally = { records: 0, enqueued: 0, pending: 0, duplicates: 0, bad: 0 };
  // Consumer ids read so far: a consumer repeated in the input is enqueued once.
  const seen = new Set<string>();
  const progress = createProgress('enqueueing');
  // On a terminal a bad line clears the bar first: it is drawn again below it.
  const clear = process.stderr.isTTY ? '\r\x1b[K' : '';
  let batch: EnrollmentPayload[] = [];
  let line = 0;
  // Progress counts records: those read, and one a line still to read (a header is no record).
  const total = () => tally.records + Math.max((context.lines ?? line) - line, 0);
  const flush = async () => {
    const answers = await enqueueEnrollments(queues, batch);
    batch = [];
    for (const { alreadyPending } of answers) tally[alreadyPending ? 'pending' : 'enqueued']++;
    follower?.watch(answers.map((a) => a.jobId));
    await follower?.readEvents();
    progress.update(tally.records, total(), tallyDetail(tally));
  };
  for await (const record of records) {
    tally.records++;
    line = record.line;
    const checked = checkRecord(record, consumerIdKey);
    if (!checked.ok) {
      tally.bad++;
      process.stderr.write(`${clear}line ${record.line}: ${checked.problem}\n`);
    } else if (seen.has(checked.enrollment.consumerId)) {
      tally.duplicates++;
    } else {
      seen.add(checked.enrollment.consumerId);
      batch.push(checked.enrollment);
      if (batch.length >= batchSize) await flush();
    }
    // Stops between records; what was read so far is still enqueued below.
    if (signal.aborted) break;
  }
  await flush();
  // Finished, the records read are the total (a file may end in blank lines).
  progress.update(tally.records, signal.aborted ? total() : tally.records, tallyDetail(tally));
  progress.stop();
  return tally;
}

/** The input, and its number of lines when a regular file (a pipe can be read only once). */
async function openInput(file: string): Promise<{ input: Readable; lines: number | undefined }> {
  if (file === '-') return { input: process.stdin, lines: undefined };
  const cannotRead = (why: string) => new UsageError(`enroll: cannot read --file ${file}: ${why}`);
  try {
    const stats = await stat(file);
    // A pipe (`<(zcat signups.csv.gz)`) is read as it comes, without a line count.
    if (stats.isDirectory()) throw cannotRead('it is a directory');
    const lines = stats.isFile() ? await countLines(createReadStream(file)) : undefined;
    return { input: createReadStream(file), lines };
  } catch (error) {
    throw error instanceof UsageError ? error : cannotRead((error as Error).message);
  }
}

async function countLines(stream: Readable): Promise<number> {
  let lines = 0;
  let last = 10;
  for await (const chunk of stream as AsyncIterable<Buffer>) {
    for (let i = chunk.indexOf(10); i !== -1; i = chunk.indexOf(10, i + 1)) lines++;
    if (chunk.length > 0) last = chunk[chunk.length - 1] ?? 10;
  }
  return last === 10 ? lines : lines + 1;
}
