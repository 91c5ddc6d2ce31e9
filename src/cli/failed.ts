import { failedJobs, jobSubject } from '../queues/inspect.js';
import { type CommandSpec, parseCommandArgs, wholeNumberOption } from './command.js';
import { producerGroups, withProducer } from './producer-session.js';
import { clip } from './report.js';
import { renderTable } from './table.js';

const spec = {
  name: 'failed',
  config: producerGroups,
  summary: 'List the failed jobs of every queue, newest first, or retry them with --retry.',
  options: {
    retry: { type: 'boolean' },
    limit: { type: 'string' },
    json: { type: 'boolean' },
  },
  help: [
    '--retry                retry the listed failed jobs (they go back to the queue)',
    '--limit N              how many failed jobs to list or retry (default 50, at most 10000)',
    '--json                 print {"jobs": [...], "retried": N} instead of a table',
  ],
} satisfies CommandSpec;

export async function run(argv: readonly string[]): Promise<number> {
  const args = parseCommandArgs(spec, argv);
  if (!args) return 0;
  const { values } = args;
  const limit = wholeNumberOption(spec, values.limit, '--limit', 1, 10_000) ?? 50;
  return withProducer(async ({ queues }) => {
    const failed = await failedJobs(queues, limit);
    const jobs = failed.map(({ queue, job }) => ({
      queue,
      jobId: job.id ?? '',
      consumer: jobSubject(job.data),
      attempts: job.attemptsMade,
      failedAt: job.finishedOn ? new Date(job.finishedOn).toISOString() : null,
      reason: job.failedReason ?? '',
    }));
    if (values.retry) {
      // A fresh set of attempts, with their backoff: one more try would rarely be enough.
      for (const { job } of failed) {
        await job.retry('failed', { resetAttemptsMade: true, resetAttemptsStarted: true });
      }
    }
    const retried = values.retry ? failed.length : 0;
    if (values.json) {
      process.stdout.write(`${JSON.stringify({ jobs, retried }, null, 2)}\n`);
      return 0;
    }
    if (jobs.length === 0) {
      process.stdout.write('no failed jobs\n');
      return 0;
    }
    const rows = jobs.map((j) => [
      j.queue,
      j.jobId,
      j.consumer,
      j.attempts,
      j.failedAt ?? '',
      clip(j.reason, 160),
    ]);
    process.stdout.write(
      `${renderTable(['queue', 'job', 'consumer', 'attempts', 'failed at', 'reason'], rows)}\n`,
    );
    if (values.retry) process.stdout.write(`retried ${retried} job(s)\n`);
    return 0;
  });
}
