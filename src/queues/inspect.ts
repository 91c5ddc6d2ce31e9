/** Read-only views of the queues for `status`, `failed` and the demo. */
import type { Job } from 'bullmq';
import { jobNames, type QueueKind } from './names.js';
import type { Queues } from './queues.js';

export const countedStates = [
  'wait',
  'prioritized',
  'active',
  'delayed',
  'completed',
  'failed',
] as const;
export type CountedState = (typeof countedStates)[number];

export async function queueCounts(
  queues: Queues,
): Promise<Record<QueueKind, Record<CountedState, number>>> {
  const entries = await Promise.all(
    (Object.keys(queues) as QueueKind[]).map(async (kind) => {
      const counts = await queues[kind].getJobCounts(...countedStates);
      const row = Object.fromEntries(countedStates.map((s) => [s, counts[s] ?? 0]));
      return [kind, row as Record<CountedState, number>] as const;
    }),
  );
  return Object.fromEntries(entries) as Record<QueueKind, Record<CountedState, number>>;
}

export interface FailedJob {
  queue: QueueKind;
  job: Job;
}

/** The most recent failed jobs of every queue, newest first, at most `limit` in all. */
export async function failedJobs(queues: Queues, limit: number): Promise<FailedJob[]> {
  const perQueue = await Promise.all(
    (Object.keys(queues) as QueueKind[]).map(async (queue) => {
      const jobs = await queues[queue].getFailed(0, limit - 1);
      return jobs.map((job) => ({ queue, job }));
    }),
  );
  return perQueue
    .flat()
    .sort((a, b) => (b.job.finishedOn ?? 0) - (a.job.finishedOn ?? 0))
    .slice(0, limit);
}

/** Jobs waiting in delayed for a retry after a failed attempt, at most `limit` in all. */
export async function retryingJobs(queues: Queues, limit: number): Promise<FailedJob[]> {
  const perQueue = await Promise.all(
    (Object.keys(queues) as QueueKind[]).map(async (queue) => {
      const jobs = await queues[queue].getDelayed(0, limit - 1);
      return jobs.filter((job) => job.failedReason).map((job) => ({ queue, job }));
    }),
  );
  return perQueue.flat().slice(0, limit);
}

export interface ReconciliationView {
  jobId: string;
  state: string;
  trigger: string;
  enqueued: number;
  startedAt: string | undefined;
  finishedAt: string | undefined;
  failedReason: string | undefined;
}

/** The latest reconciliation, running or finished, if any is still retained. */
export async function lastReconciliation(queues: Queues): Promise<ReconciliationView | undefined> {
  const jobs = await queues.reconciliation.getJobs(
    ['active', 'wait', 'delayed', 'completed', 'failed'],
    0,
    20,
  );
  const latest = jobs
    .filter((job) => job.name === jobNames.reconcile)
    .sort((a, b) => b.timestamp - a.timestamp)[0];
  if (!latest?.id) return undefined;
  const data = latest.data as { trigger?: string; enqueued?: number; startedAt?: string };
  const result = latest.returnvalue as { enqueued?: number; finishedAt?: string } | null;
  return {
    jobId: latest.id,
    state: await latest.getState(),
    trigger: data.trigger ?? 'manual',
    enqueued: result?.enqueued ?? data.enqueued ?? 0,
    startedAt: data.startedAt,
    finishedAt: result?.finishedAt,
    failedReason: latest.failedReason || undefined,
  };
}

/**
 * The consumer a job is about, for display (`first +7 more` for a job of several): failed
 * jobs are where malformed payloads end up, so the data may be anything (null, a string, an
 * array).
 */
export function jobSubject(data: unknown): string {
  if (typeof data !== 'object' || data === null) return '';
  const { consumerId, userId, consumerIds } = data as {
    consumerId?: unknown;
    userId?: unknown;
    consumerIds?: unknown;
  };
  if (typeof consumerId === 'string') return consumerId.slice(0, 100);
  if (typeof userId === 'string') return userId.slice(0, 100);
  if (!Array.isArray(consumerIds) || typeof consumerIds[0] !== 'string') return '';
  const more = consumerIds.length > 1 ? ` +${consumerIds.length - 1} more` : '';
  return `${consumerIds[0].slice(0, 100)}${more}`;
}
