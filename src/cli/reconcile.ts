import { setTimeout as sleep } from 'node:timers/promises';
import { loadConfig } from '../config.js';
import { OperationalError } from '../errors.js';
import { type ReconciliationView, reconciliationView } from '../queues/inspect.js';
import type { Producer } from '../queues/producer.js';
import { withProducer } from './producer-session.js';
import { createProgress } from './progress.js';
import { reconciliationBlock } from './report.js';

export interface ReconcileOptions {
  wait?: boolean;
}

/** How often --wait reads the reconciliation's figures. */
const pollMs = 1000;

export async function run(options: ReconcileOptions): Promise<number> {
  const { queuePrefix } = loadConfig(['redis']).redis;
  return withProducer(async (producer) => {
    const { jobId, started } = await producer.startReconciliation();
    process.stdout.write(
      started
        ? `started reconciliation (job ${jobId})\n`
        : `a reconciliation is already pending or running (job ${jobId}); not started again\n`,
    );
    if (!options.wait) return 0;
    // Ctrl-C stops following, cleanly (the bar ends, the cursor comes back), not the work.
    const interrupted = new AbortController();
    const onSigint = () => interrupted.abort();
    process.once('SIGINT', onSigint);
    try {
      const view = await follow(producer, queuePrefix, jobId, interrupted.signal);
      if (!view) {
        process.stderr.write(
          `stopped following; reconciliation ${jobId} goes on in the worker (perks-worker status)\n`,
        );
        return 130;
      }
      process.stdout.write(`${reconciliationBlock(view)}\n`);
      return view.state === 'finished' && view.consumers.failed === 0 ? 0 : 1;
    } finally {
      process.off('SIGINT', onSigint);
    }
  });
}

/**
 * Polls the reconciliation until it has finished or failed, showing its progress; undefined
 * when `signal` stopped it first.
 */
async function follow(
  producer: Producer,
  prefix: string,
  jobId: string,
  signal: AbortSignal,
): Promise<ReconciliationView | undefined> {
  const tallies = { redis: producer.connection, prefix };
  const progress = createProgress('reconcile');
  try {
    for (;;) {
      const job = await producer.queues.reconciliation.getJob(jobId);
      if (!job) throw new ReconciliationGoneError(jobId);
      const view = await reconciliationView(producer.queues, tallies, job);
      const { total, enqueued, synced, failed, notEnrolled } = view.consumers;
      progress.update(
        synced + failed + notEnrolled,
        total,
        view.state === 'waiting'
          ? 'waiting for a worker to start it (is perks-worker work running?)'
          : `${enqueued} enqueued, ${failed} failed, ${notEnrolled} not enrolled`,
      );
      if (view.state === 'finished' || view.state === 'failed') return view;
      await sleep(pollMs, undefined, { signal }).catch(() => {});
      if (signal.aborted) return undefined;
    }
  } finally {
    progress.stop();
  }
}

/** The job was removed (KEEP_COMPLETED_JOBS=0, or by hand) before --wait could see it end. */
export class ReconciliationGoneError extends OperationalError {
  override readonly name = 'ReconciliationGoneError';
  constructor(jobId: string) {
    super(
      `reconcile: the reconciliation job ${jobId} is gone (removed by job retention?); see perks-worker status`,
    );
  }
}
