/**
 * `enroll --file --wait`: follows enrollment jobs to their end, counts the outcomes, sums them up.
 *
 * The queue's event stream, read from a point taken before the first job was added, says when
 * each job completes or fails for good. It is capped (about 10,000 entries) and completed jobs
 * are removed beyond KEEP_COMPLETED_JOBS, so for 100,000 jobs neither is enough alone: the
 * stream is read after every batch and every `pollMs`, and the hashes of the jobs still pending
 * every `sweepEveryMs`. A job gone from Redis before either saw it counts as unknown.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Queue } from 'bullmq';
import { failedPermanently } from '../jobs/failures.js';
import type { RedisClient } from '../redis/connection.js';
import { type Progress, waitingForWorker } from './progress.js';

const noOutcomes = () => ({
  created: 0,
  alreadyEnrolled: 0,
  failed: 0,
  /** Ended without an outcome this command could read (removed from Redis first, or another shape). */
  unknown: 0,
  /** Failure reason -> how many jobs failed for good with it. */
  failures: new Map<string, number>(),
  /** Of the failed, those that failed permanently: retrying cannot help them. */
  permanent: 0,
  /** A worker was seen at work on the queue (a job started or ended): without one, none ends. */
  workerSeen: false,
  /** Jobs still pending when following stopped early (interrupted). */
  pending: 0,
});
export type EnrollmentOutcomes = ReturnType<typeof noOutcomes>;

const readCount = 5000;
const sweepChunk = 1000;
const pollMs = 250;
const sweepEveryMs = 5000;

export class EnrollmentFollower {
  private readonly pending = new Set<string>();
  private readonly outcomes = noOutcomes();

  private constructor(
    private readonly queue: Queue,
    private readonly redis: RedisClient,
    private lastEventId: string,
  ) {}

  /** Call before the first job is added: events from here on are read. */
  static async start(queue: Queue, redis: RedisClient): Promise<EnrollmentFollower> {
    const last = (await redis.xrevrange(queue.toKey('events'), '+', '-', 'COUNT', 1))[0];
    return new EnrollmentFollower(queue, redis, last?.[0] ?? '0-0');
  }

  watch(jobIds: Iterable<string>): void {
    for (const id of jobIds) this.pending.add(id);
  }

  get followed(): number {
    const { created, alreadyEnrolled, failed, unknown } = this.outcomes;
    return created + alreadyEnrolled + failed + unknown + this.pending.size;
  }

  async readEvents(): Promise<void> {
    const key = this.queue.toKey('events');
    for (;;) {
      const reply = (await this.redis.xread(
        'COUNT',
        readCount,
        'STREAMS',
        key,
        this.lastEventId,
      )) as [string, [string, string[]][]][] | null;
      const entries = reply?.[0]?.[1] ?? [];
      const failed: [string, string | undefined][] = [];
      for (const [id, fields] of entries) {
        this.lastEventId = id;
        const event = new Map<string, string>();
        for (let i = 0; i + 1 < fields.length; i += 2)
          event.set(fields[i] ?? '', fields[i + 1] ?? '');
        const jobId = event.get('jobId') ?? '';
        const name = event.get('event') ?? '';
        if (['active', 'completed', 'failed'].includes(name)) this.outcomes.workerSeen = true;
        if (name === 'completed') this.end(jobId, outcomeOf(event.get('returnvalue')));
        else if (name === 'failed' && this.pending.has(jobId))
          failed.push([jobId, event.get('failedReason')]);
      }
      await this.endFailed(failed);
      if (entries.length < readCount) return;
    }
  }

  /** The event says why a job failed, its stack trace whether permanently. */
  private async endFailed(failed: readonly [string, string | undefined][]): Promise<void> {
    if (failed.length === 0) return;
    const pipeline = this.redis.pipeline();
    for (const [id] of failed) pipeline.hget(this.queue.toKey(id), 'stacktrace');
    const replies = (await pipeline.exec()) ?? [];
    failed.forEach(([id, reason], k) => {
      this.end(id, failure(reason, replies[k]?.[1]));
    });
  }

  async sweep(): Promise<void> {
    const ids = [...this.pending];
    for (let i = 0; i < ids.length; i += sweepChunk) {
      const chunk = ids.slice(i, i + sweepChunk);
      const pipeline = this.redis.pipeline();
      for (const id of chunk) {
        const fields = ['name', 'processedOn', 'finishedOn', 'returnvalue', 'failedReason'];
        pipeline.hmget(this.queue.toKey(id), ...fields, 'stacktrace');
      }
      const replies = (await pipeline.exec()) ?? [];
      chunk.forEach((id, k) => {
        const [error, value] = replies[k] ?? [];
        if (error) throw error;
        const hash = value as (string | null)[];
        const [name, processedOn, finishedOn, returnvalue, failedReason, stacktrace] = hash;
        if (processedOn !== null) this.outcomes.workerSeen = true;
        if (name === null) this.end(id, 'unknown');
        // A job failing with attempts left has a failedReason too; only a finished job ended.
        else if (finishedOn !== null) {
          this.end(id, returnvalue ? outcomeOf(returnvalue) : failure(failedReason, stacktrace));
        }
      });
    }
  }

  /** Until every followed job has ended or `signal` aborts; the first sweep at once. */
  async untilDone(progress: Progress, signal: AbortSignal): Promise<EnrollmentOutcomes> {
    let sweptAt = 0;
    while (this.pending.size > 0 && !signal.aborted) {
      await this.readEvents();
      if (Date.now() - sweptAt >= sweepEveryMs) {
        await this.sweep();
        sweptAt = Date.now();
      }
      const ended = this.followed - this.pending.size;
      const { workerSeen } = this.outcomes;
      const detail = workerSeen ? describeOutcomes(this.outcomes) : waitingForWorker('them');
      progress.update(ended, this.followed, detail);
      if (this.pending.size > 0) await sleep(pollMs, undefined, { signal }).catch(() => {});
    }
    progress.stop();
    return { ...this.outcomes, pending: this.pending.size };
  }

  private end(jobId: string, outcome: Outcome): void {
    if (!this.pending.delete(jobId)) return;
    if (typeof outcome === 'string') this.outcomes[outcome]++;
    else {
      this.outcomes.failed++;
      if (outcome.permanent) this.outcomes.permanent++;
      const { failures } = this.outcomes;
      failures.set(outcome.reason, (failures.get(outcome.reason) ?? 0) + 1);
    }
  }
}

type Outcome = 'created' | 'alreadyEnrolled' | 'unknown' | { reason: string; permanent: boolean };

/** A failed job's outcome; `stacktrace` as its hash holds it (JSON), if read. */
function failure(reason: string | null | undefined, stacktrace: unknown): Outcome {
  let traces: string[] = [];
  try {
    traces = typeof stacktrace === 'string' ? (JSON.parse(stacktrace) as string[]) : [];
  } catch {}
  return { reason: reason || '(no reason recorded)', permanent: failedPermanently(traces) };
}

/** A completed job's outcome; unknown for a result this version does not know. */
function outcomeOf(returnvalue: string | null | undefined): Outcome {
  try {
    const { outcome } = (JSON.parse(returnvalue ?? 'null') ?? {}) as { outcome?: unknown };
    if (outcome === 'created') return 'created';
    return outcome === 'already_enrolled' ? 'alreadyEnrolled' : 'unknown';
  } catch {
    return 'unknown';
  }
}

function describeOutcomes(o: EnrollmentOutcomes): string {
  const unknown = o.unknown > 0 ? `, outcome unknown ${o.unknown}` : '';
  return `created ${o.created}, already enrolled ${o.alreadyEnrolled}, failed ${o.failed}${unknown}`;
}

/** Reasons shown one by one; the rest are summed on one line. */
const reasonsShown = 10;

/** What became of the `followed` jobs; failures summed by reason, most frequent first. */
export function followSummary(outcomes: EnrollmentOutcomes, followed: number): string[] {
  const { pending, failures, permanent } = outcomes;
  const goOn = outcomes.workerSeen
    ? 'they go on in the worker'
    : 'no worker has started one: they wait for perks-worker work';
  const lines = [
    pending > 0
      ? `stopped following: ${followed - pending} of ${followed} enrollments ended (${describeOutcomes(outcomes)}), ${pending} still pending; ${goOn}`
      : `followed ${followed} enrollments: ${describeOutcomes(outcomes)}`,
  ];
  if (failures.size === 0) return lines;
  const reasons = [...failures].sort((a, b) => b[1] - a[1]);
  const width = String(reasons[0]?.[1] ?? 0).length;
  lines.push(`failed ${outcomes.failed}, by reason:`);
  for (const [reason, count] of reasons.slice(0, reasonsShown)) {
    lines.push(`  ${String(count).padStart(width)}  ${reason}`);
  }
  const rest = reasons.slice(reasonsShown);
  if (rest.length > 0) {
    const jobs = rest.reduce((sum, [, count]) => sum + count, 0);
    lines.push(`  ${String(jobs).padStart(width)}  (${rest.length} other reasons)`);
  }
  const retryable = outcomes.failed - permanent;
  if (permanent > 0) {
    lines.push(
      `${permanent} failed permanently: retrying cannot help (fix the cause, enroll again)`,
    );
  }
  if (retryable > 0) {
    const which = permanent > 0 ? `the other ${retryable}` : 'each failed job';
    lines.push(`${which} is listed by 'perks-worker failed' and can be retried there`);
  }
  return lines;
}
