/**
 * PostgreSQL away is no job's fault, and however long it lasts no job may spend its attempts on
 * it: a job that meets it goes back to wait, and this replica's workers pause for 1 s, doubling
 * with each failed ping up to 60 s, at whose end it pings the database; the first answer resumes
 * them. Only this replica's: the cause may be its own (its network, its pooler). /readyz says so
 * through its postgres check, which pings the same pool.
 *
 * An error that looks like it (isDatabaseAway: a connection refused, lost or timed out) is
 * confirmed by a ping first: one a statement of the job's own caused (a pooler's query timeout,
 * a backend that crashed on it) is the job's failure, and spends an attempt. The rounds and
 * their backoff are OutageRounds', as the token mint's are.
 */
import type { Worker } from 'bullmq';
import { describeError } from '../errors.js';
import type { Logger } from '../ops/logger.js';
import { withTimeout } from '../ops/timeouts.js';
import { OutageRounds, type WorkerPauses } from './pauses.js';

interface DatastoreOutageOptions {
  /** `select 1` on the pool the jobs use. */
  ping: () => Promise<void>;
  pauses: WorkerPauses;
  logger: Logger;
}

/** A job's ping answers within this or PostgreSQL counts as away (a silent host never answers). */
const confirmTimeoutMs = 2000;
/** The pause's own ping may wait on a slow reconnect longer. */
const pingTimeoutMs = 15_000;

export class DatastoreOutage {
  readonly #rounds: OutageRounds;
  #confirming: Promise<boolean> | undefined;
  #closed = false;

  constructor(private readonly options: DatastoreOutageOptions) {
    const retry = () => void this.#ping();
    this.#rounds = new OutageRounds({ outage: 'postgres', pauses: options.pauses, retry });
  }

  /** Every worker of this replica: each of its jobs reads or writes the datastore. */
  attach(workers: Worker[]): void {
    this.#rounds.attach(workers);
  }

  /**
   * Whether `error`, met by a job, is PostgreSQL away: true during a pause, else when a ping
   * (one for the jobs asking at once) fails too, which starts a pause. Never throws.
   */
  async met(error: unknown): Promise<boolean> {
    if (this.#closed) return false;
    if (this.#rounds.pausing) return true;
    this.#confirming ??= withTimeout(this.options.ping(), confirmTimeoutMs)
      .then(
        () => false,
        async () => {
          await this.#round(error);
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
    this.#rounds.close();
  }

  async #round(error: unknown): Promise<void> {
    const round = this.#rounds.begin();
    if (!round) return;
    const { failures, pauseMs } = round;
    const fields = { failures, pauseMs, err: { message: describeError(error) } };
    const { logger } = this.options;
    if (!round.first) logger.warn(fields, 'postgres still unreachable');
    else logger.error(fields, 'postgres unreachable; this replica takes no job until it answers');
    await this.#rounds.hold(pauseMs);
  }

  async #ping(): Promise<void> {
    try {
      await withTimeout(this.options.ping(), pingTimeoutMs);
    } catch (error) {
      await this.#round(error);
      return;
    }
    const ended = await this.#rounds.end();
    this.options.logger.info(ended ?? {}, 'postgres answers again; the jobs resume');
  }
}
