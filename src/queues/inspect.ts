/** Read-only views of the queues for `status`, `failed` and the demo. */
import type { Job, Queue } from 'bullmq';
import { readLastReconciliation, readTally, type TallyStore } from '../reconciliation/tally.js';
import { jobNames, type QueueKind } from './names.js';
import type { ReconciliationPayload } from './payloads.js';
import type { Queues } from './queues.js';

const countedStates = ['wait', 'prioritized', 'active', 'delayed', 'completed', 'failed'] as const;
export type CountedState = (typeof countedStates)[number];

export type FailedJob = { queue: QueueKind; job: Job };

type Counts = Record<QueueKind, Record<CountedState, number>>;

export async function queueCounts(queues: Queues): Promise<Counts> {
  const kinds = Object.keys(queues) as QueueKind[];
  const rows = kinds.map(async (kind) => {
    const counts = await queues[kind].getJobCounts(...countedStates);
    return [kind, Object.fromEntries(countedStates.map((s) => [s, counts[s] ?? 0]))] as const;
  });
  return Object.fromEntries(await Promise.all(rows)) as Counts;
}

/**
 * How long the API queues stay held by a 429 (pauseApiQueues: `queue.rateLimit`, for every
 * replica), in ms; 0 when not held. Asked at the limit `rateLimit` sets, so that the count of a
 * PERKS_RATE_LIMIT_PER_SECOND window is no hold.
 */
export async function apiQueuesHeldMs(queues: Queues): Promise<number> {
  const held = [queues.enrollment, queues.rewardSync].map((queue) =>
    queue.getRateLimitTtl(Number.MAX_SAFE_INTEGER),
  );
  return Math.max(0, ...(await Promise.all(held)));
}

/** The most recent failed jobs of every queue, newest first, at most `limit` in all. */
export async function failedJobs(queues: Queues, limit: number): Promise<FailedJob[]> {
  const jobs = await jobsOf(queues, (queue) => queue.getFailed(0, limit - 1));
  return jobs.sort((a, b) => (b.job.finishedOn ?? 0) - (a.job.finishedOn ?? 0)).slice(0, limit);
}

/** Jobs waiting in delayed for a retry after a failed attempt, at most `limit` in all. */
export async function retryingJobs(queues: Queues, limit: number): Promise<FailedJob[]> {
  const jobs = await jobsOf(queues, (queue) => queue.getDelayed(0, limit - 1));
  return jobs.filter(({ job }) => job.failedReason).slice(0, limit);
}

/** What `read` answers on every queue, each job with its queue. */
async function jobsOf(queues: Queues, read: (queue: Queue) => Promise<Job[]>) {
  const kinds = Object.keys(queues) as QueueKind[];
  const perQueue = kinds.map(async (queue) =>
    (await read(queues[queue])).map((job) => ({ queue, job })),
  );
  return (await Promise.all(perQueue)).flat();
}

export type ReconciliationView = Awaited<ReturnType<typeof reconciliationView>>;

/** The latest reconciliation, running or finished, if any is still retained. */
export async function lastReconciliation(
  queues: Queues,
  tallies: TallyStore,
): Promise<ReconciliationView | undefined> {
  const states = ['active', 'wait', 'delayed', 'completed', 'failed'] as const;
  const jobs = await queues.reconciliation.getJobs([...states], 0, 20);
  // The last one started, whatever was since: the 21 newest of each state may all be prunings.
  const lastId = await readLastReconciliation(tallies);
  const last = lastId ? await queues.reconciliation.getJob(lastId) : undefined;
  const latest = [...jobs, ...(last ? [last] : [])]
    .filter((job) => job.name === jobNames.reconcile)
    .sort((a, b) => b.timestamp - a.timestamp)[0];
  return latest ? reconciliationView(queues, tallies, latest) : undefined;
}

/** One reconciliation's state and figures, from its job and its tally. */
export async function reconciliationView(queues: Queues, tallies: TallyStore, job: Job) {
  const jobId = job.id ?? '';
  const [jobState, tally] = await Promise.all([job.getState(), readTally(tallies, jobId)]);
  const data = job.data as ReconciliationPayload;
  const result = job.returnvalue as { enqueued?: number } | null;
  const enqueued = result?.enqueued ?? data.enqueued ?? 0;
  const startedAt = data.startedAt ?? (job.processedOn ? iso(job.processedOn) : undefined);
  // waiting: not started yet; running: fanning out, or syncs of its consumers still to end;
  // finished: every consumer's sync ended; failed: the fan-out itself failed for good.
  let state: 'waiting' | 'running' | 'finished' | 'failed' = startedAt ? 'running' : 'waiting';
  let finishedAt: string | undefined;
  if (jobState === 'failed') {
    state = 'failed';
    finishedAt = job.finishedOn ? iso(job.finishedOn) : undefined;
  } else if (tally.finishedAt) {
    state = 'finished';
    finishedAt = tally.finishedAt;
  } else if (jobState === 'completed' && (await nothingLeftOf(queues, tallies, jobId))) {
    // Every sync of it ended, but an outcome went uncounted (e.g. a job failed by the stalled
    // check, which no listener hears): finished all the same, as of now.
    state = 'finished';
    finishedAt = new Date().toISOString();
  }
  const end = finishedAt ? Date.parse(finishedAt) : Date.now();
  return {
    jobId,
    trigger: data.trigger ?? 'manual',
    state,
    queuedAt: iso(job.timestamp), // when enqueued; it starts when a worker picks it up
    ...(startedAt ? { startedAt } : {}),
    ...(finishedAt ? { finishedAt } : {}),
    ...(startedAt ? { durationSeconds: Math.round((end - Date.parse(startedAt)) / 1000) } : {}),
    consumers: {
      // Consumers it covers: counted at its start until its fan-out ends, exact after.
      total: tally.total ?? Math.max(tally.expected ?? 0, enqueued),
      enqueued,
      synced: tally.synced,
      failed: tally.failed,
      notEnrolled: tally.notEnrolled,
    },
    ...(job.failedReason ? { failedReason: job.failedReason } : {}),
  };
}

/** Pending sync jobs read whole to look for a reconciliation's; a longer backlog is not. */
const scanLimit = 1000;

/** How long after a job fails for good its outcome may still be on its way to the tally. */
const countingMs = 10_000;

/** True when no sync job carries the reconciliation still (read only for short backlogs). */
async function nothingLeftOf(queues: Queues, tallies: TallyStore, reconciliation: string) {
  const queue = queues.rewardSync;
  const states = ['wait', 'prioritized', 'active', 'delayed'] as const;
  const counts = await queue.getJobCounts(...states);
  const pending = Object.values(counts).reduce((sum, n) => sum + n, 0);
  if (pending > scanLimit) return false;
  const ours = (job: Job | undefined) => job?.data?.reconciliation === reconciliation;
  if (pending > 0 && (await queue.getJobs([...states], 0, scanLimit)).some(ours)) return false;
  // A job failed for good is counted by the worker's `failed` listener, just after the move:
  // one of it that failed a moment ago may not be counted yet, not uncounted for good. The
  // failed set is scored by finishedOn: only those jobs are read, at most scanLimit (more in
  // 10 s: not decided until they are older).
  const since = Date.now() - countingMs;
  const failed = await tallies.redis.zrangebyscore(
    queue.toKey('failed'),
    since,
    '+inf',
    'LIMIT',
    0,
    scanLimit + 1,
  );
  if (failed.length > scanLimit) return false;
  return !(await Promise.all(failed.map((id) => queue.getJob(id)))).some(ours);
}

const iso = (ms: number) => new Date(ms).toISOString();

/**
 * The consumer a job is about, for display (`first +7 more` for a job of several). Failed jobs
 * hold malformed payloads too: the data may be anything.
 */
export function jobSubject(data: unknown): string {
  if (typeof data !== 'object' || data === null) return '';
  const { consumerId, userId, consumerIds } = data as Record<string, unknown>;
  if (typeof consumerId === 'string') return consumerId.slice(0, 100);
  if (typeof userId === 'string') return userId.slice(0, 100);
  if (!Array.isArray(consumerIds) || typeof consumerIds[0] !== 'string') return '';
  const more = consumerIds.length > 1 ? ` +${consumerIds.length - 1} more` : '';
  return `${consumerIds[0].slice(0, 100)}${more}`;
}
