/**
 * `enroll --file --wait`: follows enrollment jobs to their end and counts the outcomes.
 *
 * The queue's event stream, read from a point taken before the first job was added, says when
 * each job completes or fails for good. It is capped (about 10,000 entries) and completed jobs
 * are removed beyond KEEP_COMPLETED_JOBS, so for 100,000 jobs neither is enough alone: the
 * stream is read after every batch and every `pollMs`, and the hashes of the jobs still pending
 * every `sweepEveryMs`. A job gone from Redis before either saw it counts as unknown.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Queue } from 'bullmq';
import type { RedisClient } from '../redis/connection.js';
import type { Progress } from './progress.js';

export interface EnrollmentOutcomes {
  created: number;
  alreadyEnrolled: number;
  failed: number;
  /** Ended without an outcome this command could read (removed from Redis first, or another shape). */
  unknown: number;
  /** Failure reason -> how many jobs failed for good with it. */
  failures: Map<string, number>;
  /** Jobs still pending when following stopped early (interrupted). */
  pending: number;
}

const readCount = 5000;
const sweepChunk = 1000;
const pollMs = 250;
const sweepEveryMs = 5000;

export class EnrollmentFollower {
  private readonly pending = new Set<string>();
  private readonly outcomes: EnrollmentOutcomes = {
    created: 0,
    alreadyEnrolled: 0,
    failed: 0,
    unknown: 0,
    failures: new Map(),
    pending: 0,
  };

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
    return this.finished + this.pending.size;
  }

  get finished(): number {
    const { created, alreadyEnrolled, failed, unknown } = this.outcomes;
    return created + alreadyEnrolled + failed + unknown;
  }

  async readEvents(): Promise<void> {
    for (;;) {
      const reply = (await this.redis.xread(
        'COUNT',
        readCount,
        'STREAMS',
        this.queue.toKey('events'),
        this.lastEventId,
      )) as [string, [string, string[]][]][] | null;
      const entries = reply?.[0]?.[1] ?? [];
      for (const [id, fields] of entries) {
        this.lastEventId = id;
        this.recordEvent(fields);
      }
      if (entries.length < readCount) return;
    }
  }

  private recordEvent(fields: string[]): void {
    const jobId = fieldOf(fields, 'jobId') ?? '';
    const event = fieldOf(fields, 'event');
    if (event === 'completed') this.end(jobId, outcomeOf(fieldOf(fields, 'returnvalue')));
    else if (event === 'failed') this.end(jobId, failure(fieldOf(fields, 'failedReason')));
  }

  async sweep(): Promise<void> {
    const ids = [...this.pending];
    for (let i = 0; i < ids.length; i += sweepChunk) {
      const chunk = ids.slice(i, i + sweepChunk);
      const pipeline = this.redis.pipeline();
      for (const id of chunk) {
        pipeline.hmget(this.queue.toKey(id), 'name', 'finishedOn', 'returnvalue', 'failedReason');
      }
      const replies = (await pipeline.exec()) ?? [];
      chunk.forEach((id, k) => {
        const [error, value] = replies[k] ?? [];
        if (error) throw error;
        const [name, finishedOn, returnvalue, failedReason] = value as (string | null)[];
        if (name === null) this.end(id, 'unknown');
        // A job failing with attempts left has a failedReason too; only a finished job ended.
        else if (finishedOn !== null) {
          this.end(id, returnvalue ? outcomeOf(returnvalue) : failure(failedReason));
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
      progress.update(this.finished, this.followed, describeOutcomes(this.outcomes));
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
      const { reason } = outcome;
      this.outcomes.failures.set(reason, (this.outcomes.failures.get(reason) ?? 0) + 1);
    }
  }
}

type Outcome = 'created' | 'alreadyEnrolled' | 'unknown' | { reason: string };

const failure = (reason: string | null | undefined): Outcome => ({
  reason: reason || '(no reason recorded)',
});

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

export function describeOutcomes(o: Omit<EnrollmentOutcomes, 'failures' | 'pending'>): string {
  const unknown = o.unknown > 0 ? `, outcome unknown ${o.unknown}` : '';
  return `created ${o.created}, already enrolled ${o.alreadyEnrolled}, failed ${o.failed}${unknown}`;
}

function fieldOf(fields: string[], name: string): string | undefined {
  for (let i = 0; i + 1 < fields.length; i += 2) if (fields[i] === name) return fields[i + 1];
  return undefined;
}
