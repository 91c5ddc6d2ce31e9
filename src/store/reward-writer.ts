/**
 * Coalesces the small page writes of concurrent syncs into one statement (group commit): a
 * small page costs PostgreSQL more to plan than to run, and every statement waits for its WAL
 * flush. While `lanes` statements of small pages run, further small pages queue and go in the
 * next one; a page that finds a lane free is written at once. A large page is written alone.
 *
 * Pages of one statement share no consumer and no reward id; a page that would waits, with
 * its consumer's later pages (they keep their order), and so does a page whose consumer is
 * being written (two overlapping syncs of one consumer wait instead of deadlocking).
 *
 * A statement of several pages refused for its data (SQLSTATE 22, 23, 40) is written again page
 * by page, so one page's error fails that page's job only. Any other failure fails them all.
 */
import type pg from 'pg';
import { errorCode } from './errors.js';
import {
  isEmptyWrite,
  type PreparedPage,
  preparePage,
  type RewardPageResult,
  reserialized,
  rewardWriteSql,
  type WriteRewardPageInput,
  writeRewardPages,
} from './rewards.js';
import type { RewardEventType } from './types.js';

export interface RewardWriterLimits {
  /** Statements of small pages running at once. */
  lanes: number;
  /** A page of more rows is written alone. */
  smallRows: number;
  /** A sync end listing more ids is written alone. */
  smallSeenIds: number;
  /** Per statement of small pages: */
  maxPages: number;
  maxRows: number;
  maxSeenIds: number;
}

/** The most pages one statement of small pages writes, whatever the writers. */
const maxPagesPerStatement = 100;

/** `writers`: the syncs a replica runs at once (`syncsInFlight`), if known. */
export const defaultWriterLimits = (poolSize: number, writers?: number): RewardWriterLimits => ({
  // Fewer lanes, larger batches; the rest of the pool serves large pages and other queries.
  lanes: Math.max(1, Math.floor(poolSize / 8)),
  smallRows: 100,
  smallSeenIds: 1000,
  // Half the writers at most: half of them fetch their next page while the other half is written.
  maxPages:
    writers === undefined
      ? maxPagesPerStatement
      : Math.min(maxPagesPerStatement, Math.max(1, Math.ceil(writers / 2))),
  maxRows: 1000,
  maxSeenIds: 5000,
});

interface Pending {
  page: PreparedPage;
  resolve(result: RewardPageResult): void;
  reject(error: unknown): void;
}

const nothingWritten = (page: PreparedPage): RewardPageResult => ({
  inserted: 0,
  updated: 0,
  unchanged: page.given,
  statusChanges: 0,
  markedMissing: 0,
});

const seenCount = (page: PreparedPage) => page.finish?.missing?.seenIds.length ?? 0;

/** The class of a PostgreSQL error's SQLSTATE (its first two characters); none for others. */
function sqlStateClass(error: unknown): string | undefined {
  const code = errorCode(error);
  return code && /^[0-9A-Z]{5}$/.test(code) ? code.slice(0, 2) : undefined;
}

/** 22 data exception, 23 integrity constraint, 40 transaction rollback (deadlock). */
const perPageRefusal = (error: unknown) => ['22', '23', '40'].includes(sqlStateClass(error) ?? '');

export class RewardWriter {
  readonly #pool: pg.Pool;
  readonly #sql: string;
  readonly #limits: RewardWriterLimits;
  readonly #eventTypes: readonly RewardEventType[];
  #queue: Pending[] = [];
  #running = 0;
  /** Consumers with a small page in a running statement. */
  readonly #writing = new Set<string>();
  /** Statements run and pages they wrote, since the start (pages / statements: the batching). */
  readonly totals = { statements: 0, pages: 0 };

  constructor(
    pool: pg.Pool,
    schemaSql: string,
    limits: RewardWriterLimits,
    eventTypes: readonly RewardEventType[],
  ) {
    this.#pool = pool;
    this.#sql = rewardWriteSql(schemaSql);
    this.#limits = limits;
    this.#eventTypes = eventTypes;
  }

  /** Writes one page (and the end of its sync, given `finish`); see the module's comment. */
  async write(input: WriteRewardPageInput): Promise<RewardPageResult> {
    const page = preparePage(input);
    if (isEmptyWrite(page)) return nothingWritten(page);
    if (page.ids.length > this.#limits.smallRows || seenCount(page) > this.#limits.smallSeenIds) {
      return this.#alone(page);
    }
    return new Promise<RewardPageResult>((resolve, reject) => {
      this.#queue.push({ page, resolve, reject });
      this.#pump();
    });
  }

  #pump(): void {
    while (this.#running < this.#limits.lanes && this.#queue.length > 0) {
      const batch = this.#take();
      if (batch.length === 0) return;
      this.#running += 1;
      for (const { page } of batch) this.#writing.add(page.consumerId);
      void this.#run(batch);
    }
  }

  /** Frees the lane of a finished statement and starts the next one. */
  #release(batch: readonly Pending[]): void {
    this.#running -= 1;
    for (const { page } of batch) this.#writing.delete(page.consumerId);
    this.#pump();
  }

  /** Takes from the queue, in order, what one statement may write (see the module's comment). */
  #take(): Pending[] {
    const limits = this.#limits;
    const batch: Pending[] = [];
    const rest: Pending[] = [];
    const consumers = new Set<string>();
    const ids = new Set<string>();
    let rows = 0;
    let seen = 0;
    for (const entry of this.#queue) {
      const { page } = entry;
      const fits =
        batch.length < limits.maxPages &&
        rows + page.ids.length <= limits.maxRows &&
        seen + seenCount(page) <= limits.maxSeenIds &&
        !consumers.has(page.consumerId) &&
        !this.#writing.has(page.consumerId) &&
        !page.ids.some((id) => ids.has(id));
      // A page left behind holds back its consumer's later pages too.
      consumers.add(page.consumerId);
      if (!fits) {
        rest.push(entry);
        continue;
      }
      batch.push(entry);
      rows += page.ids.length;
      seen += seenCount(page);
      for (const id of page.ids) ids.add(id);
    }
    this.#queue = rest;
    return batch;
  }

  /** One statement; refused for a value in a body as sent, once more `reserialized`. */
  async #statement(pages: readonly PreparedPage[]): Promise<RewardPageResult[]> {
    this.totals.statements += 1;
    this.totals.pages += pages.length;
    try {
      return await writeRewardPages(this.#pool, this.#sql, pages, this.#eventTypes);
    } catch (error) {
      if (sqlStateClass(error) !== '22' || !pages.some((page) => page.asSent)) throw error;
      this.totals.statements += 1;
      return writeRewardPages(this.#pool, this.#sql, pages.map(reserialized), this.#eventTypes);
    }
  }

  async #alone(page: PreparedPage): Promise<RewardPageResult> {
    const [result] = await this.#statement([page]);
    return result ?? nothingWritten(page);
  }

  async #run(batch: readonly Pending[]): Promise<void> {
    let results: RewardPageResult[];
    try {
      results = await this.#statement(batch.map((entry) => entry.page));
    } catch (error) {
      if (batch.length === 1 || !perPageRefusal(error)) {
        this.#release(batch);
        for (const entry of batch) entry.reject(error);
        return;
      }
      // Its consumers stay held until each page is written again: a later page of one of
      // them must not overtake it.
      for (const entry of batch) {
        try {
          entry.resolve(await this.#alone(entry.page));
        } catch (alone) {
          entry.reject(alone);
        }
      }
      this.#release(batch);
      return;
    }
    // The next statement goes out before this one's jobs go on (the pool sends a query on a
    // later tick): resolved at once, they would run first and keep the database waiting.
    setImmediate(() => {
      batch.forEach((entry, i) => {
        entry.resolve(results[i] ?? nothingWritten(entry.page));
      });
    });
    this.#release(batch);
  }
}
