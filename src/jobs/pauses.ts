/**
 * This replica's workers, paused for outages that may overlap (the token mint failing,
 * PostgreSQL away): a worker resumes only once every outage holding it has ended, so the end
 * of one never sets jobs loose on another.
 */
import type { Worker } from 'bullmq';

export class WorkerPauses {
  readonly #holds = new Map<Worker, Set<string>>();

  /** Pauses `workers` for `outage` (again: no change). Never throws. */
  async hold(outage: string, workers: readonly Worker[]): Promise<void> {
    const pausing = workers.filter((worker) => {
      const holds = this.#holds.get(worker) ?? new Set<string>();
      const running = holds.size === 0;
      this.#holds.set(worker, holds.add(outage));
      return running;
    });
    // Not waiting for the active jobs: a job's own failure pauses its worker.
    await Promise.allSettled(pausing.map((worker) => worker.pause(true)));
  }

  /** `outage` has ended: the workers it alone held resume. Never throws. */
  async release(outage: string): Promise<void> {
    const resuming = [...this.#holds].flatMap(([worker, holds]) =>
      holds.delete(outage) && holds.size === 0 ? [worker] : [],
    );
    for (const worker of resuming) this.#holds.delete(worker);
    await Promise.allSettled(resuming.map(async (worker) => worker.resume()));
  }
}

const [minPauseMs, maxPauseMs] = [1000, 60_000];

export interface OutageRoundsOptions {
  /** Its name among the holds of `pauses`. */
  outage: string;
  pauses: WorkerPauses;
  /** Tries again once a round's pause is over (a mint, a ping): it ends the outage or fails on. */
  retry: () => void;
}

/**
 * One kind of outage, in rounds: each starts on a failure, holds the workers for 1 s, doubling to
 * 60 s, and then runs `retry`; `end` releases them. An outage that begins again within a minute
 * of the last one's end goes on with its backoff: a cause that returns whenever the workers
 * resume is tried once a minute at most.
 */
export class OutageRounds {
  #failures = 0;
  #since: Date | undefined;
  #endedAt = Number.NEGATIVE_INFINITY;
  /** performance.now(): a wall clock stepped back must not stretch a pause. */
  #pausedUntil = 0;
  #timer: NodeJS.Timeout | undefined;
  #closed = false;
  #workers: Worker[] = [];

  constructor(private readonly options: OutageRoundsOptions) {}

  /** While the outage lasts: its failed rounds, and since when. */
  get on(): { failures: number; since: Date } | undefined {
    return this.#since && { failures: this.#failures, since: this.#since };
  }

  /** Within a round's pause: a failure now is that round's. */
  get pausing(): boolean {
    return performance.now() < this.#pausedUntil;
  }

  /** The workers it holds; held at once if the outage began before they started. */
  attach(workers: Worker[]): void {
    this.#workers = workers;
    if (this.#since) void this.options.pauses.hold(this.options.outage, workers);
  }

  /** Starts a round (none once closed); `hold` then pauses the workers for it. */
  begin(): { failures: number; pauseMs: number; first: boolean } | undefined {
    if (this.#closed) return undefined;
    const now = performance.now();
    const first = this.#since === undefined;
    if (first && now - this.#endedAt > maxPauseMs) this.#failures = 0;
    this.#failures += 1;
    this.#since ??= new Date();
    const pauseMs = Math.min(minPauseMs * 2 ** (this.#failures - 1), maxPauseMs);
    this.#pausedUntil = now + pauseMs;
    return { failures: this.#failures, pauseMs, first };
  }

  /** Holds the workers for the round begun, then `retry` when its pause ends. Never throws. */
  async hold(pauseMs: number): Promise<void> {
    await this.options.pauses.hold(this.options.outage, this.#workers);
    if (this.#closed) return;
    clearTimeout(this.#timer);
    this.#timer = setTimeout(this.options.retry, pauseMs);
    this.#timer.unref();
  }

  /** The outage is over: the workers resume. What it was, if one was on. */
  async end(): Promise<{ failures: number; downMs: number } | undefined> {
    const since = this.#since;
    clearTimeout(this.#timer);
    this.#since = undefined;
    this.#pausedUntil = 0;
    this.#endedAt = performance.now();
    if (!since) return undefined;
    await this.options.pauses.release(this.options.outage);
    return { failures: this.#failures, downMs: Date.now() - since.getTime() };
  }

  close(): void {
    this.#closed = true;
    clearTimeout(this.#timer);
  }
}
