/** Text tables and blocks of `status`, `failed`, `events` and `demo`. */
import { clip } from '../errors.js';
import type { MintFailure } from '../jobs/mint-outage.js';
import {
  type CountedState,
  type FailedJob,
  jobSubject,
  type ReconciliationView,
} from '../queues/inspect.js';
import { type QueueKind, queueNames } from '../queues/names.js';
import type { DeliveryLag } from '../store/event-deliveries.js';
import type { ConsumerFailure, DatastoreSummary } from '../store/summary.js';

/** Lines on stdout, each ended with a newline. */
export const say = (...lines: string[]) => process.stdout.write(`${lines.join('\n')}\n`);

const states = ['wait', 'prioritized', 'active', 'delayed', 'completed', 'failed'] as const;

export function queuesBlock(counts: Record<QueueKind, Record<CountedState, number>>): string {
  const rows = Object.entries(counts).map(([kind, c]) => [
    queueNames[kind as QueueKind],
    ...states.map((state) => c[state]),
  ]);
  return renderTable(['queue', 'waiting', ...states.slice(1)], rows);
}

/** The last reconciliation: its state, times and what became of its consumers. */
export function reconciliationBlock(view: ReconciliationView | undefined): string {
  if (!view) return 'last reconciliation: none retained';
  const { consumers: c, state } = view;
  const ended = c.synced + c.failed + c.notEnrolled;
  const share = c.total > 0 ? ` (${Math.floor((100 * ended) / c.total)}%)` : '';
  const running = state === 'running' ? `; ${ended} done${share}, ${c.enqueued} enqueued` : '';
  const waited = Math.round((Date.now() - Date.parse(view.queuedAt)) / 1000);
  const took = `${state === 'running' ? 'running for' : 'took'} ${formatDuration(view.durationSeconds ?? 0)}`;
  const lines = [
    `last reconciliation: ${state.toUpperCase()} (job ${view.jobId}, ${view.trigger})`,
    state === 'waiting' &&
      `  queued    ${view.queuedAt}; no worker has started it (${formatDuration(waited)})`,
    view.startedAt && `  started   ${view.startedAt}`,
    view.finishedAt && `  finished  ${view.finishedAt}`,
    view.durationSeconds !== undefined && `  duration  ${took}`,
    state !== 'waiting' &&
      `  consumers ${c.total} in all: ${c.synced} synced, ${c.failed} failed, ${c.notEnrolled} not enrolled${running}`,
    view.failedReason && `  reason    ${clip(view.failedReason, 200)}`,
  ];
  return lines.filter((line) => typeof line === 'string' && line !== '').join('\n');
}

export function formatDuration(seconds: number): string {
  const h = Math.floor(seconds / 3600);
  const m = Math.floor((seconds % 3600) / 60);
  const s = seconds % 60;
  return [h ? `${h} h` : '', m ? `${m} min` : '', `${s} s`].filter(Boolean).join(' ');
}

export function datastoreBlock(s: DatastoreSummary): string {
  const byStatus = Object.entries(s.rewardsByConsumerStatus)
    .map(([status, n]) => `${status} ${n}`)
    .join(', ');
  return renderTable(
    ['datastore', 'value'],
    [
      ['consumers', s.consumers],
      ['  enrolled (created)', s.enrolledCreated],
      ['  enrolled (already existed, 409)', s.enrolledAlready],
      ['  not enrolled upstream (ERR-404-02)', s.notEnrolled],
      ['  with an error', s.withError],
      ['  synced at least once', s.synced],
      ['rewards stored', s.rewards],
      ['  by consumer status', byStatus || '-'],
      ['  missing upstream', s.rewardsMissing],
      ['  total amount', s.totalAmount],
      ['rewards rejected (rejected_rewards)', s.rewardsRejected],
      ['status changes recorded', s.statusChanges],
      ['last sync finished', s.lastSyncedAt?.toISOString() ?? '-'],
    ],
  );
}

/** Delayed jobs that failed an attempt and will run again, with that attempt's error. */
export function retryingBlock(jobs: readonly FailedJob[]): string {
  if (jobs.length === 0) return 'retrying: none';
  const rows = jobs
    .map(jobJson)
    .map((j) => [`job ${j.queue}/${j.jobId}`, j.consumer, j.attempts, clip(j.reason, 140)]);
  return renderTable(['retrying', 'consumer', 'attempts', 'last error'], rows);
}

/** A line of `status` while a mint fails: no API job runs where it does. */
export function mintFailureLine(f: MintFailure): string {
  const [state, effect] = f.refused
    ? ['REFUSED', 'the replicas holding these credentials take no API job']
    : ['FAILING', 'the replicas meeting it take no API job'];
  return `perks api: TOKEN MINT ${state} for client ${f.clientId} since ${f.since} (${f.reason}: ${clip(f.message, 200)}); ${effect}, next try ${f.nextTryAt}`;
}

export function failuresBlock(
  jobs: readonly FailedJob[],
  consumers: readonly ConsumerFailure[],
): string {
  if (jobs.length === 0 && consumers.length === 0) return 'failures: none';
  const rows = [
    ...jobs.map(jobJson).map((j) => [`job ${j.queue}/${j.jobId}`, j.consumer, clip(j.reason, 140)]),
    ...consumers.map((c) => ['consumer last_error', c.consumerId, clip(c.lastError, 140)]),
  ];
  return renderTable(['failure', 'consumer', 'reason'], rows);
}

/** One line on how far webhook delivery is behind, for `events` and `status`. */
export function lagLine(lag: DeliveryLag, webhooks: boolean): string {
  if (!webhooks) return 'webhook delivery: off here (WEBHOOK_URL unset); events are recorded only';
  const failed =
    lag.failed > 0 ? `; ${lag.failed} event(s) failed (perks-worker events --failed)` : '';
  if (!lag.oldest) return `webhook delivery: up to date${failed}`;
  const { id, createdAt } = lag.oldest;
  const seconds = Math.round((Date.now() - createdAt.getTime()) / 1000);
  return `webhook delivery: ${lag.consumers} consumer(s) waiting, oldest undelivered ${id ? `evt_${id} ` : ''}recorded ${seconds} s ago${failed}`;
}

/** A failed job as `status --json` and `failed --json` show it. */
export const jobJson = ({ queue, job }: FailedJob) => ({
  queue,
  jobId: job.id ?? '',
  consumer: jobSubject(job.data),
  attempts: job.attemptsMade,
  reason: job.failedReason ?? '',
});

/** Rows as an aligned text table (numbers right-aligned), for humans at a terminal. */
export function renderTable(
  header: readonly string[],
  rows: readonly (readonly (string | number)[])[],
): string {
  const cells = [header, ...rows].map((row) => row.map((cell) => String(cell)));
  const widths = header.map((_, i) => Math.max(...cells.map((row) => (row[i] ?? '').length)));
  const line = (row: readonly string[], source: readonly (string | number)[]) =>
    row
      .map((cell, i) =>
        typeof source[i] === 'number' ? cell.padStart(widths[i] ?? 0) : cell.padEnd(widths[i] ?? 0),
      )
      .join('  ')
      .trimEnd();
  return [
    line(cells[0] ?? [], header),
    widths.map((w) => '-'.repeat(w)).join('  '),
    ...rows.map((row, i) => line(cells[i + 1] ?? [], row)),
  ].join('\n');
}
