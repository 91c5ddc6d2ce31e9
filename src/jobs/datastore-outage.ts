/**
 * PostgreSQL away is no job's fault, and however long it lasts no job may spend its attempts on
 * it: a job that meets it goes back to wait, and this replica's workers pause for 1 s, doubling
 * with each failed ping up to 60 s, at whose end it pings the database; the first answer resumes
 * them. Only this replica's: the cause may be its own (its network, its pooler). /readyz says so
 * through its postgres check, which pings the same pool.
 *
 * An error that looks like it (isDatabaseAway: a connection refused, lost or timed out) is
 * confirmed by a ping first: one a statement of the job's own caused (a pooler's query timeout,
 * a backend that crashed on it) is the job's failure, and spends an attempt. An outage that
 * starts again within a minute of the last one's end goes on with its backoff, so that a job
 * bringing the server down each time it runs is tried once a minute at most.
 */
import type { Worker } from 'bullmq';
import { describeError } from '../errors.js';
import type { Logger } from '../ops/logger.js';
import { withTimeout } from '../ops/timeouts.js';
import type { WorkerPauses } from './pauses.js';

interface DatastoreOutageOptions {
  /** `select 1` on the pool the jobs use. */
  ping: () => Promise<void>;
  pauses: WorkerPauses;
  logger: Logger;
}

const [minPauseMs, maxPauseMs] = [1000, 60_000];
/** A job's ping answers within this or PostgreSQL counts as away (a silent host never answers). */
const confirmTimeoutMs = 2000;
/** The pause's own ping may wait on a slow reconnect longer. */
const pingTimeoutMs = 15_000;
const outage = 'postgres';

export class DatastoreOutage {
  #failures = 0;
  #since: number | undefined;
  #recoveredAt = Number.NEGATIVE_INFINITY;
  /** performance.now() clock: a wall clock stepped back must not stretch a pause. */
  #pausedUntil = 0;
  #timer: NodeJS.Timeout | undefined;
  #confirming: Promise<boolean> | undefined;
  #closed = false;
  #workers: Worker[] = [];

  constructor(private readonly options: DatastoreOutageOptions) {}

  /** Every worker of this replica: each of its jobs reads or writes the datastore. */
  attach(workers: Worker[]): void {
    this.#workers = workers;
  }

  /**
   * Whether `error`, met by a job, is PostgreSQL away: true during a pause, else when a ping
   * (one for the jobs asking at once) fails too, which starts a pause. Never throws.
   */
  async met(error: unknown): Promise<boolean> {
    if (this.#closed) return false;
    if (performance.now() < this.#pausedUntil) return true;
    this.#confirming ??= withTimeout(this.options.ping(), confirmTimeoutMs)
      .then(
        () => false,
        async () => {
          await this.#pause(error);
          return true;
        },
      )
      .finally(() => {
        this.#confirming = undefined;
      });
    return this.#confirming;
  }

  close(): void {
    this.#closed = true;
    clearTimeout(this.#timer);
  }

  /** A round of the outage: pause the workers, ping when it ends (always: none is skipped). */
  async #pause(error: unknown): Promise<void> {
    if (this.#closed) return;
    const now = performance.now();
    const starts = this.#since === undefined;
    if (starts && now - this.#recoveredAt > maxPauseMs) this.#failures = 0;
    this.#failures += 1;
    this.#since ??= Date.now();
    const pauseMs = Math.min(minPauseMs * 2 ** (this.#failures - 1), maxPauseMs);
    this.#pausedUntil = now + pauseMs;
    const fields = { failures: this.#failures, pauseMs, err: { message: describeError(error) } };
    const { logger, pauses } = this.options;
    if (!starts) logger.warn(fields, 'postgres still unreachable');
    else logger.error(fields, 'postgres unreachable; this replica takes no job until it answers');
    await pauses.hold(outage, this.#workers);
    if (this.#closed) return;
    clearTimeout(this.#timer);
    this.#timer = setTimeout(() => void this.#ping(), pauseMs);
    this.#timer.unref();
  }

  async #ping(): Promise<void> {
    try {
      await withTimeout(this.options.ping(), pingTimeoutMs);
    } catch (error) {
      await this.#pause(error);
      return;
    }
    const fields = { failures: this.#failures, downMs: Date.now() - (this.#since ?? Date.now()) };
    this.#since = undefined;
    this.#recoveredAt = performance.now();
    this.#pausedUntil = 0;
    await this.options.pauses.release(outage);
    this.options.logger.info(fields, 'postgres answers again; the jobs resume');
  }
}
