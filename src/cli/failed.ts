import { clip } from '../errors.js';
import { failedPermanently } from '../jobs/failures.js';
import { failedJobs } from '../queues/inspect.js';
import { jobNames } from '../queues/names.js';
import { withProducer } from './producer-session.js';
import { jobJson, renderTable, say } from './report.js';

export async function run(options: { retry?: boolean; limit: number; json?: boolean }) {
  const { retry = false, limit, json = false } = options;
  return withProducer(async ({ queues }) => {
    const failed = await failedJobs(queues, limit);
    const jobs = failed.map((f) => ({
      ...jobJson(f),
      failedAt: f.job.finishedOn ? new Date(f.job.finishedOn).toISOString() : null,
      permanent: failedPermanently(f.job.stacktrace),
    }));
    // A fresh set of attempts, with their backoff: one more try would rarely be enough. A job
    // that failed permanently would only fail again: it is skipped. So is a webhook delivery:
    // the dispatcher sends its consumer's events again by itself, and a retried job, outside
    // the deduplication, could run beside that one, out of order. So is a reconciliation: BullMQ
    // retries it without its deduplication, and it would fan out beside a new one.
    const reset = { resetAttemptsMade: true, resetAttemptsStarted: true };
    const outsideDeduplication = (f: (typeof failed)[number]) =>
      f.queue === 'webhooks' || f.job.name === jobNames.reconcile;
    const retryable = retry
      ? failed.filter((f, i) => !jobs[i]?.permanent && !outsideDeduplication(f))
      : [];
    for (const { job } of retryable) await job.retry('failed', reset);
    const retried = retryable.length;
    const skipped = retry ? failed.length - retried : 0;
    if (json) say(JSON.stringify({ jobs, retried, skipped }, null, 2));
    else if (jobs.length === 0) say('no failed jobs');
    else {
      const header = ['queue', 'job', 'consumer', 'attempts', 'failed at', 'failure', 'reason'];
      const rows = jobs.map((j) => [
        j.queue,
        j.jobId,
        j.consumer,
        j.attempts,
        j.failedAt ?? '',
        j.permanent ? 'permanent' : 'retryable',
        clip(j.reason, 160),
      ]);
      const skips =
        skipped > 0
          ? `; skipped ${skipped} that failed permanently (retrying cannot help: fix the cause and enqueue them again), deliver webhooks (their events are sent again by the dispatcher) or reconcile (run \`perks-worker reconcile\`)`
          : '';
      say(renderTable(header, rows), ...(retry ? [`retried ${retried} job(s)${skips}`] : []));
    }
    return 0;
  });
}
