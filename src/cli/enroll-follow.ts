/**
 * `enroll --file --wait`: follows enrollment jobs to their end and counts the outcomes.
 *
 * The queue's event stream says when each job completes (with its `{ consumerId, outcome }`)
 * or fails for good, and is read from a point taken before the first job was added, so no end
 * is missed. The stream is capped (about 10,000 entries) and completed jobs are removed beyond
 * KEEP_COMPLETED_JOBS, so neither alone is enough for 100,000 jobs: the stream is read after
 * every batch enqueued and every `pollMs`, and a sweep reads the job hashes still pending every
 * `sweepEveryMs`, for any end the stream no longer holds. A job gone from Redis before either
 * saw it is counted as such, never guessed.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Queue } from 'bullmq';
import type { RedisClient } from '../queues/connection.js';
import type { Progress } from './progress.js';

export interface EnrollmentOutcomes {
  created: number;
  alreadyEnrolled: number;
  failed: number;
  /**
   * Ended without an outcome this command could read: removed from Redis before its end was
   * seen (another tool removed it, or it aged out), or a result of another shape.
   */
  unknown: number;
  /** Failure reason -> how many jobs failed for good with it. */
  failures: Map<string, number>;
  /** Jobs still pending when following stopped early (interrupted). */
  pending: number;
}

export interface FollowOptions {
  /** How often the event stream is read while waiting. Default 250 ms. */
  pollMs?: number;
  /** How often the pending job hashes are read. Default 5 s. */
  sweepEveryMs?: number;
}

const readCount = 5000;
const sweepChunk = 1000;

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

  /** Jobs to follow (new ones, or pending ones of an earlier run). */
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

  /** Reads every event since the last read, and records the ends of followed jobs. */
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
    const event = fieldOf(fields, 'event');
    if (event !== 'completed' && event !== 'failed') return;
    const jobId = fieldOf(fields, 'jobId');
    if (jobId === undefined || !this.pending.has(jobId)) return;
    if (event === 'completed') this.completed(jobId, fieldOf(fields, 'returnvalue'));
    else this.failedForGood(jobId, fieldOf(fields, 'failedReason'));
  }

  /** Reads the hashes of the jobs still pending, `sweepChunk` to a pipeline. */
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
        if (name === null) this.end(id, () => this.outcomes.unknown++);
        // A job failing with attempts left has a failedReason too; only a finished job ended.
        else if (finishedOn === null) return;
        else if (returnvalue !== null && returnvalue !== undefined) this.completed(id, returnvalue);
        else this.failedForGood(id, failedReason ?? undefined);
      });
    }
  }

  /**
   * Until every followed job has ended, or `signal` aborts: events every `pollMs`, a sweep at
   * once (ends missed while enqueueing) and then every `sweepEveryMs`.
   */
  async untilDone(
    progress: Progress,
    signal: AbortSignal,
    options: FollowOptions = {},
  ): Promise<EnrollmentOutcomes> {
    const { pollMs = 250, sweepEveryMs = 5000 } = options;
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

  private completed(jobId: string, returnvalue: string | undefined): void {
    this.end(jobId, () => {
      const outcome = outcomeOf(returnvalue);
      if (outcome === 'created') this.outcomes.created++;
      else if (outcome === 'already_enrolled') this.outcomes.alreadyEnrolled++;
      else this.outcomes.unknown++;
    });
  }

  private failedForGood(jobId: string, reason: string | undefined): void {
    this.end(jobId, () => {
      this.outcomes.failed++;
      const key = reason || '(no reason recorded)';
      this.outcomes.failures.set(key, (this.outcomes.failures.get(key) ?? 0) + 1);
    });
  }

  private end(jobId: string, count: () => void): void {
    if (this.pending.delete(jobId)) count();
  }
}

/** `created`, `already_enrolled`, or undefined for a result this version does not know. */
function outcomeOf(returnvalue: string | undefined): string | undefined {
  try {
    const value = JSON.parse(returnvalue ?? 'null') as { outcome?: unknown } | null;
    return typeof value?.outcome === 'string' ? value.outcome : undefined;
  } catch {
    return undefined;
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
