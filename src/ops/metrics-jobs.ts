/** Metrics of the jobs: attempts and failures per queue, queue depths, and the domain facts. */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { withTimeout } from './timeouts.js';

/** Why a job attempt did not complete, as a bounded label. */
export type FailureReason =
  | 'unrecoverable'
  | 'rate_limited'
  | 'postgres_unreachable'
  | 'shutdown'
  | 'error';

/** The reasons of an attempt sent back to wait, no attempt spent. */
export const backToWait: readonly string[] = ['rate_limited', 'postgres_unreachable', 'shutdown'];

/** Whatever can count its jobs by state: a BullMQ Queue, without ops needing queue code. */
export interface CountableQueue {
  readonly name: string;
  getJobCounts(...types: string[]): Promise<Record<string, number>>;
}

/** A scrape gives up on queue depths after this long. */
export const scrapeReadTimeoutMs = 1000;

/**
 * A gauge read from PostgreSQL at every scrape, once `watch` gives it its reader; absent until
 * then, and left out of a scrape that cannot read it in time.
 */
export function scrapedGauge(name: string, help: string, registers: Registry[]) {
  let read: (() => Promise<number>) | undefined;
  new Gauge({
    name,
    help,
    registers,
    async collect() {
      if (!read) return;
      try {
        this.set(await withTimeout(read(), scrapeReadTimeoutMs));
      } catch {
        this.reset(); // PostgreSQL away or slow
      }
    },
  });
  return (reader: () => Promise<number>) => {
    read = reader;
  };
}

/** What the worker assembly records around every job attempt, and the queues it watches. */
export function workerMetrics(registers: Registry[]) {
  const completed = new Counter({
    name: 'perks_worker_jobs_completed_total',
    help: 'Jobs completed, per queue.',
    labelNames: ['queue'] as const,
    registers,
  });
  const failed = new Counter({
    name: 'perks_worker_jobs_failed_total',
    help: 'Jobs failed for good (no attempt left, or unrecoverable), per queue and reason.',
    labelNames: ['queue', 'reason'] as const,
    registers,
  });
  const retried = new Counter({
    name: 'perks_worker_jobs_retried_total',
    help: 'Job attempts that failed and will be retried (error: with backoff, spending an attempt; rate_limited: back to wait, not spending one, for a 429, a failing token mint or refused credentials; postgres_unreachable: back to wait, PostgreSQL away; shutdown: back to wait, cancelled by a shutdown).',
    labelNames: ['queue', 'reason'] as const,
    registers,
  });
  const duration = new Histogram({
    name: 'perks_worker_job_duration_seconds',
    help: 'Duration of one job attempt, per queue and outcome.',
    labelNames: ['queue', 'outcome'] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
    registers,
  });
  let watched: readonly CountableQueue[] = [];
  const states = ['wait', 'prioritized', 'active', 'delayed', 'failed'];
  new Gauge({
    name: 'perks_worker_queue_jobs',
    help: 'Jobs in each queue per state, read from Redis at scrape time (shared by all replicas).',
    labelNames: ['queue', 'state'] as const,
    registers,
    async collect() {
      this.reset();
      const queues = watched;
      // Redis away: the series are left out of this scrape (and /readyz says why).
      const counts = await withTimeout(
        Promise.all(queues.map((queue) => queue.getJobCounts(...states))),
        scrapeReadTimeoutMs,
      ).catch(() => []);
      for (const [i, c] of counts.entries()) {
        const queue = queues[i]?.name ?? '';
        // 'prioritized' jobs are waiting too, in another list.
        this.set({ queue, state: 'waiting' }, (c.wait ?? 0) + (c.prioritized ?? 0));
        for (const state of ['active', 'delayed', 'failed'])
          this.set({ queue, state }, c[state] ?? 0);
      }
    },
  });
  return {
    /** Every attempt; one sent back to wait also counts as retried (BullMQ emits no event). */
    jobAttempt(queue: string, outcome: 'completed' | FailureReason, durationSeconds: number) {
      duration.observe({ queue, outcome }, durationSeconds);
      if (backToWait.includes(outcome)) retried.inc({ queue, reason: outcome });
    },
    jobCompleted: (queue: string) => completed.inc({ queue }),
    /** Jobs this process completed, by queue name (a queue keeps only KEEP_COMPLETED_JOBS). */
    async completedJobs(): Promise<Record<string, number>> {
      const { values } = await completed.get();
      return Object.fromEntries(values.map((v) => [String(v.labels.queue), v.value]));
    },
    /** `final` when no attempt is left (or it was unrecoverable). */
    jobFailed: (queue: string, reason: FailureReason, final: boolean) =>
      (final ? failed : retried).inc({ queue, reason }),
    /** Read the depth of these queues at every scrape; their series exist from the start, at 0. */
    watchQueues(queues: readonly CountableQueue[]) {
      watched = queues;
      for (const { name: queue } of queues) {
        completed.inc({ queue }, 0);
        for (const reason of ['unrecoverable', 'error']) failed.inc({ queue, reason }, 0);
        for (const reason of [...backToWait, 'error']) retried.inc({ queue, reason }, 0);
      }
    },
  };
}

export type RewardSyncOutcome = 'synced' | 'not_enrolled' | 'retried_alone';

/** What processors record: domain facts, not job mechanics. */
export function jobMetrics(registers: Registry[]) {
  const rewards = new Counter({
    name: 'perks_worker_rewards_written_total',
    help: 'Rewards written to Postgres, per result: inserted (new), updated (changed) or unchanged.',
    labelNames: ['result'] as const,
    registers,
  });
  const statusChanges = new Counter({
    name: 'perks_worker_reward_status_changes_total',
    help: 'Reward status changes recorded.',
    registers,
  });
  const pages = new Counter({
    name: 'perks_worker_reward_pages_written_total',
    help: 'Reward pages written to Postgres.',
    registers,
  });
  const rejected = new Counter({
    name: 'perks_worker_rewards_rejected_total',
    help: 'Reward items the schema refused, at every sync that read them (kept in rejected_rewards; the rest of their page is written).',
    registers,
  });
  const watchRejected = scrapedGauge(
    'perks_worker_rewards_rejected',
    'Rows of rejected_rewards: reward items refused and still served by the API, read from PostgreSQL at scrape time.',
    registers,
  );
  const enrollments = new Counter({
    name: 'perks_worker_enrollments_total',
    help: 'Consumers enrolled, per outcome (created, or already_enrolled: a 409).',
    labelNames: ['outcome'] as const,
    registers,
  });
  const rewardSyncs = new Counter({
    name: 'perks_worker_reward_syncs_total',
    help: 'Consumer reward syncs ended, per outcome: synced, not_enrolled, or retried_alone (failed in a job of several consumers; retried in its own job).',
    labelNames: ['outcome'] as const,
    registers,
  });
  const reconcileEnqueued = new Gauge({
    name: 'perks_worker_reconciliation_enqueued_consumers',
    help: 'Consumers enqueued for a reward sync by the reconciliation running in this process (0 when none).',
    registers,
  });
  const reconciliations = new Counter({
    name: 'perks_worker_reconciliations_finished_total',
    help: 'Reconciliations that finished fanning out in this process.',
    registers,
  });
  return {
    rewardPageWritten(
      written: Record<'inserted' | 'updated' | 'unchanged' | 'statusChanges', number>,
    ) {
      pages.inc();
      for (const result of ['inserted', 'updated', 'unchanged'] as const)
        rewards.inc({ result }, written[result]);
      statusChanges.inc(written.statusChanges);
    },
    rewardsRejected: (count: number) => rejected.inc(count),
    /** Read the count of rejected_rewards at every scrape. */
    watchRejectedRewards: watchRejected,
    enrollment: (outcome: 'created' | 'already_enrolled') => enrollments.inc({ outcome }),
    /** `retried_alone`: it failed inside a job of several consumers and got a job of its own. */
    rewardSync: (outcome: RewardSyncOutcome) => rewardSyncs.inc({ outcome }),
    /** Consumers enqueued so far by the running reconciliation. */
    reconciliationProgress: (enqueued: number) => reconcileEnqueued.set(enqueued),
    reconciliationFinished() {
      reconcileEnqueued.set(0);
      reconciliations.inc();
    },
  };
}
