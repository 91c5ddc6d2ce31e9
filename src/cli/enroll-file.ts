/**
 * `perks-worker enroll --file <path|->`: enqueues the records `batchSize` at a time with the
 * single enrollment's deduplication, reports bad lines on stderr as they come, and with
 * `--wait` follows the jobs to their end. A rerun does no harm: a consumer whose enrollment is
 * pending gets no second job, and one enrolled meanwhile is answered 409 (already enrolled).
 */
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import type { Readable } from 'node:stream';
import { loadConfig } from '../config.js';
import { UsageError } from '../errors.js';
import { enqueueEnrollments, type ValidEnrollment } from '../queues/bulk-enroll.js';
import type { Producer } from '../queues/producer.js';
import { EnrollmentFollower } from './enroll-follow.js';
import {
  EnrollmentInputError,
  type InputFormat,
  type InputRecord,
  readRecords,
  sniffFormat,
} from './enroll-input.js';
import {
  checkRecord,
  type EnrollmentTally,
  printFollowSummary,
  tallyDetail,
  tallyLine,
} from './enroll-report.js';
import { withProducer } from './producer-session.js';
import { createProgress } from './progress.js';

const batchSize = 1000;

/**
 * `file` is a path or `-` (stdin); without `format`, the first character tells. Exit status: 0,
 * 1 when a line was bad or (with --wait) a job did not end well, 130 when interrupted.
 */
export async function enrollFromFile(options: {
  file: string;
  format: InputFormat | undefined;
  wait: boolean;
}): Promise<number> {
  const { input, lines } = await openInput(options.file);
  const format = options.format ?? (await sniffFormat(input));
  const consumerIdKey = loadConfig(['consumerIds']).consumerIds.key;
  const interrupted = new AbortController();
  const stop = () => interrupted.abort();
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  try {
    return await withProducer(async (producer) => {
      const follower = options.wait
        ? await EnrollmentFollower.start(producer.queues.enrollment, producer.connection)
        : undefined;
      const tally = await enqueueRecords(
        producer,
        readRecords(input, format),
        { consumerIdKey, lines, follower },
        interrupted.signal,
      );
      process.stdout.write(`${tallyLine(tally)}\n`);
      if (interrupted.signal.aborted) {
        process.stderr.write(
          'interrupted: run the same command again to enqueue the rest; what is pending is not enqueued twice\n',
        );
        return 130;
      }
      let ok = tally.bad === 0;
      if (follower) {
        const progress = createProgress('following');
        const outcomes = await follower.untilDone(progress, interrupted.signal);
        printFollowSummary(outcomes, follower.followed);
        if (outcomes.pending > 0) return 130;
        ok = ok && outcomes.failed === 0 && outcomes.unknown === 0;
      }
      return ok ? 0 : 1;
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

interface EnqueueContext {
  consumerIdKey: string | undefined;
  /** Of the input when known (a file): the progress bar's total. */
  lines: number | undefined;
  follower: EnrollmentFollower | undefined;
}

async function enqueueRecords(
  producer: Producer,
  records: AsyncIterable<InputRecord>,
  ctx: EnqueueContext,
  signal: AbortSignal,
): Promise<EnrollmentTally> {
  const tally: EnrollmentTally = { records: 0, enqueued: 0, pending: 0, duplicates: 0, bad: 0 };
  // Consumer ids read so far: a consumer repeated in the input is enqueued once.
  const seen = new Set<string>();
  const progress = createProgress('enqueueing');
  const bad = badLineWriter();
  let batch: ValidEnrollment[] = [];
  let line = 0;
  const flush = async () => {
    const answers = await enqueueEnrollments(producer.queues, batch);
    batch = [];
    for (const answer of answers) {
      if (answer.alreadyPending) tally.pending++;
      else tally.enqueued++;
    }
    if (ctx.follower) {
      ctx.follower.watch(answers.map((a) => a.jobId));
      await ctx.follower.readEvents();
    }
    progress.update(line, Math.max(ctx.lines ?? line, line), tallyDetail(tally));
  };
  for await (const record of records) {
    tally.records++;
    line = record.line;
    const checked = checkRecord(record, ctx.consumerIdKey);
    if (!checked.ok) {
      tally.bad++;
      bad(`line ${record.line}: ${checked.problem}`);
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
  // Finished, the last line read is the total (a file may end in blank lines).
  progress.update(
    line,
    signal.aborted ? Math.max(ctx.lines ?? line, line) : line,
    tallyDetail(tally),
  );
  progress.stop();
  return tally;
}

/** On a terminal the line is cleared first: the progress bar is drawn again below it. */
function badLineWriter(stream: NodeJS.WriteStream = process.stderr): (text: string) => void {
  const clear = stream.isTTY ? '\r\x1b[K' : '';
  return (text) => stream.write(`${clear}${text}\n`);
}

/** The input, and its number of lines when a regular file (a pipe can be read only once). */
async function openInput(file: string): Promise<{ input: Readable; lines: number | undefined }> {
  if (file === '-') return { input: process.stdin, lines: undefined };
  try {
    const lines = (await stat(file)).isFile()
      ? await countLines(createReadStream(file))
      : undefined;
    return { input: createReadStream(file), lines };
  } catch (error) {
    throw new UsageError(`enroll: cannot read --file ${file}: ${(error as Error).message}`);
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
