import { failedJobs } from '../queues/inspect.js';
import { withProducer } from './producer-session.js';
import { clip, jobJson, renderTable, say } from './report.js';

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
    if (json) say(JSON.stringify({ jobs, retried }, null, 2));
    else if (jobs.length === 0) say('no failed jobs');
    else {
      const header = ['queue', 'job', 'consumer', 'attempts', 'failed at', 'reason'];
      const rows = jobs.map((j) => [
        j.queue,
        j.jobId,
        j.consumer,
        j.attempts,
        j.failedAt ?? '',
        clip(j.reason, 160),
      ]);
      say(renderTable(header, rows), ...(retry ? [`retried ${retried} job(s)`] : []));
    }
    return 0;
  });
}
