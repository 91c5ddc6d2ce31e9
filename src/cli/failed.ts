import { failedJobs, jobSubject } from '../queues/inspect.js';
import { type CommandSpec, parseCommandArgs, wholeNumberOption } from './command.js';
import { withProducer } from './producer-session.js';
import { renderTable } from './table.js';

const spec = {
  name: 'failed',
  summary: 'List the failed jobs of every queue, newest first, or retry them with --retry.',
  options: {
    retry: { type: 'boolean' },
    limit: { type: 'string' },
  },
  help: [
    '--retry                retry the listed failed jobs (they go back to the queue)',
    '--limit N              how many failed jobs to list or retry (default 50, at most 10000)',
  ],
} satisfies CommandSpec;

export async function run(argv: readonly string[]): Promise<number> {
  const args = parseCommandArgs(spec, argv);
  if (!args) return 0;
  const { values } = args;
  const limit = wholeNumberOption(spec, values.limit, '--limit', 1, 10_000) ?? 50;
  return withProducer(async ({ queues }) => {
    const failed = await failedJobs(queues, limit);
    if (failed.length === 0) {
      process.stdout.write('no failed jobs\n');
      return 0;
    }
    const rows = failed.map(({ queue, job }) => [
      queue,
      job.id ?? '',
      jobSubject(job.data),
      job.attemptsMade,
      job.finishedOn ? new Date(job.finishedOn).toISOString() : '',
      (job.failedReason ?? '').slice(0, 160),
    ]);
    process.stdout.write(
      `${renderTable(['queue', 'job', 'consumer', 'attempts', 'failed at', 'reason'], rows)}\n`,
    );
    if (values.retry) {
      // A fresh set of attempts, with their backoff: one more try would rarely be enough.
      for (const { job } of failed) {
        await job.retry('failed', { resetAttemptsMade: true, resetAttemptsStarted: true });
      }
      process.stdout.write(`retried ${failed.length} job(s)\n`);
    }
    return 0;
  });
}
