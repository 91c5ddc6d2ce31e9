import { setTimeout as sleep } from 'node:timers/promises';
import { OperationalError } from '../errors.js';
import { type ReconciliationView, reconciliationView } from '../queues/inspect.js';
import type { Producer } from '../queues/producer.js';
import type { TallyStore } from '../reconciliation/tally.js';
import { withProducer } from './producer-session.js';
import { createProgress, waitingForWorker } from './progress.js';
import { reconciliationBlock, say } from './report.js';

/** How often --wait reads the reconciliation's figures. */
const pollMs = 1000;

export async function run(options: { wait?: boolean }): Promise<number> {
  return withProducer(async (producer, config) => {
    const { jobId, started } = await producer.startReconciliation();
    say(
      started
        ? `started reconciliation (job ${jobId})`
        : `a reconciliation is already pending or running (job ${jobId}); not started again`,
    );
    if (!options.wait) return 0;
    // Ctrl-C stops following, cleanly (the bar ends, the cursor comes back), not the work.
    const interrupted = new AbortController();
    const onSigint = () => interrupted.abort();
    process.once('SIGINT', onSigint);
    const tallies = { redis: producer.connection, prefix: config.redis.queuePrefix };
    const view = await follow(producer, tallies, jobId, interrupted.signal).finally(() =>
      process.off('SIGINT', onSigint),
    );
    if (!view) {
      process.stderr.write(
        `stopped following; reconciliation ${jobId} goes on in the worker (perks-worker status)\n`,
      );
      return 130;
    }
    say(reconciliationBlock(view));
    return view.state === 'finished' && view.consumers.failed === 0 ? 0 : 1;
  });
}

/** Polls the reconciliation, showing its progress, until it has ended or `signal` stops it. */
async function follow(
  producer: Producer,
  tallies: TallyStore,
  jobId: string,
  signal: AbortSignal,
): Promise<ReconciliationView | undefined> {
  const progress = createProgress('reconcile');
  try {
    while (!signal.aborted) {
      const job = await producer.queues.reconciliation.getJob(jobId);
      // Removed (KEEP_COMPLETED_JOBS=0, or by hand) before it could be seen to end.
      if (!job) {
        throw new OperationalError(
          `reconcile: the reconciliation job ${jobId} is gone (removed by job retention?); see perks-worker status`,
        );
      }
      const view = await reconciliationView(producer.queues, tallies, job);
      const { total, enqueued, synced, failed, notEnrolled } = view.consumers;
      progress.update(
        synced + failed + notEnrolled,
        total,
        view.state === 'waiting'
          ? waitingForWorker('it')
          : `${enqueued} enqueued, ${failed} failed, ${notEnrolled} not enrolled`,
      );
      if (view.state === 'finished' || view.state === 'failed') return view;
      await sleep(pollMs, undefined, { signal }).catch(() => {});
    }
    return undefined;
  } finally {
    progress.stop();
  }
}
