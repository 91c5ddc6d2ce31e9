/**
 * PostgreSQL away (isDatabaseAway: its connection refused, lost or timed out, the server
 * shutting down) is no job's fault, and however long it lasts no job may spend its attempts on
 * it: a job that meets it goes back to wait, and this replica's workers pause for 1 s, doubling
 * with each failed ping up to 60 s, at whose end it pings the database; the first answer resumes
 * them. Only this replica's: the cause may be its own (its network, its pooler). /readyz says so
 * through its postgres check, which pings the same pool.
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
/** A ping on a connection that went silent (no FIN, no RST) would never end: none resumes. */
const pingTimeoutMs = 15_000;
const outage = 'postgres';

export class DatastoreOutage {
  #failures = 0;
  #since: number | undefined;
  #pausedUntil = 0;
  #timer: NodeJS.Timeout | undefined;
  #closed = false;
  #workers: Worker[] = [];

  constructor(private readonly options: DatastoreOutageOptions) {}

  /** Every worker of this replica: each of its jobs reads or writes the datastore. */
  attach(workers: Worker[]): void {
    this.#workers = workers;
  }

  /**
   * PostgreSQL was away, for a job or a ping: pause the workers, ping when the pause ends.
   * Failures during a pause are the same round's. Never throws: the job must go back to wait.
   */
  async failed(error: unknown): Promise<void> {
    const now = Date.now();
    if (this.#closed || now < this.#pausedUntil) return;
    this.#failures += 1;
    this.#since ??= now;
    const pauseMs = Math.min(minPauseMs * 2 ** (this.#failures - 1), maxPauseMs);
    this.#pausedUntil = now + pauseMs;
    const fields = { failures: this.#failures, pauseMs, err: { message: describeError(error) } };
    const { logger, pauses } = this.options;
    if (this.#failures > 1) logger.warn(fields, 'postgres still unreachable');
    else logger.error(fields, 'postgres unreachable; this replica takes no job until it answers');
    await pauses.hold(outage, this.#workers);
    if (this.#closed) return;
    clearTimeout(this.#timer);
    this.#timer = setTimeout(() => void this.#ping(), pauseMs);
    this.#timer.unref();
  }

  close(): void {
    this.#closed = true;
    clearTimeout(this.#timer);
  }

  async #ping(): Promise<void> {
    try {
      await withTimeout(this.options.ping(), pingTimeoutMs);
    } catch (error) {
      await this.failed(error);
      return;
    }
    const fields = { failures: this.#failures, downMs: Date.now() - (this.#since ?? Date.now()) };
    this.#failures = 0;
    this.#since = undefined;
    this.#pausedUntil = 0;
    await this.options.pauses.release(outage);
    this.options.logger.info(fields, 'postgres answers again; the jobs resume');
  }
}
