import { failedJobs } from '../queues/inspect.js';
import { withProducer } from './producer-session.js';
import { clip, jobJson, renderTable } from './report.js';

export async function run(options: { retry?: boolean; limit: number; json?: boolean }) {
  const { retry = false, limit, json = false } = options;
  return withProducer(async ({ queues }) => {
    const failed = await failedJobs(queues, limit);
    const jobs = failed.map((f) => ({
      ...jobJson(f),
      failedAt: f.job.finishedOn ? new Date(f.job.finishedOn).toISOString() : null,
    }));
    // A fresh set of attempts, with their backoff: one more try would rarely be enough.
    const reset = { resetAttemptsMade: true, resetAttemptsStarted: true };
    if (retry) for (const { job } of failed) await job.retry('failed', reset);
    const retried = retry ? failed.length : 0;
    if (json) {
      process.stdout.write(`${JSON.stringify({ jobs, retried }, null, 2)}\n`);
      return 0;
    }
    if (jobs.length === 0) {
      process.stdout.write('no failed jobs\n');
      return 0;
    }
    const header = ['queue', 'job', 'consumer', 'attempts', 'failed at', 'reason'];
    const rows = jobs.map((j) => [
      j.queue,
      j.jobId,
      j.consumer,
      j.attempts,
      j.failedAt ?? '',
      clip(j.reason, 160),
    ]);
    process.stdout.write(`${renderTable(header, rows)}\n`);
    if (retry) process.stdout.write(`retried ${retried} job(s)\n`);
    return 0;
  });
}
