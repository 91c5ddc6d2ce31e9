/**
 * Coalesces the small page writes of concurrent syncs into one statement (group commit).
 *
 * A small page costs PostgreSQL more to plan than to run (about 1 ms of its CPU for a 10-row
 * page), and every statement is a commit waiting for its WAL flush. So
 * while `lanes` statements of small pages are running, further small pages queue; when a
 * statement ends, the queue (within limits) goes in the next one. An idle writer adds no
 * delay: a page that finds a lane free is written at once. A large page (more than
 * `smallRows` rows, or a sync end listing more than `smallSeenIds` ids) is written alone and
 * at once: its own rows dominate its cost.
 *
 * Pages of one statement share no consumer and no reward id. A page that would is left for a
 * later statement, and so are the later pages of its consumer: a consumer's pages keep their
 * order. Nor does a small page join a statement while one of its consumer's is being written: two
 * overlapping syncs of one consumer (a stalled job run again) wait for each other instead of
 * deadlocking.
 *
 * A statement of several pages that PostgreSQL refuses for its data (a bad value, a
 * constraint, a deadlock) is written again page by page, so that one page's error fails that
 * page's job only, not its neighbours'. Any other failure (the connection, the server) fails
 * every page of the statement: each job retries.
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

/**
 * `writers`: the most writes that can be in flight at once (the syncs a replica runs at once,
 * `syncsInFlight`); unknown, a statement takes up to 100 pages.
 */
export const defaultWriterLimits = (poolSize: number, writers?: number): RewardWriterLimits => ({
  // One lane per 8 connections: small pages wait for the running statement, so the fewer the
  // lanes the larger the batches; the rest of the pool stays free for large pages and the
  // other queries.
  lanes: Math.max(1, Math.floor(poolSize / 8)),
  smallRows: 100,
  smallSeenIds: 1000,
  // Half the writers at most: a statement holding every sync's page leaves the database idle
  // afterwards, while all of them fetch their next page at once. Half of them fetch while the
  // other half is written.
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

/** SQLSTATE class 22: a value PostgreSQL refuses (a jsonb it cannot hold, a bad cast). */
const dataException = (error: unknown) => sqlStateClass(error) === '22';

/**
 * SQLSTATE classes of a refusal caused by the statement's data, which writing each page alone
 * attributes to its page: 22 data exception, 23 integrity constraint, 40 transaction rollback
 * (deadlock, serialization).
 */
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

  /** `eventTypes`: the reward events every statement records (none when empty). */
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

  /**
   * One statement, counted in `totals`. Refused for a data exception while holding a body as
   * the API sent it, it runs once more with the items serialized from their parse (see
   * `reserialized`).
   */
  async #statement(pages: readonly PreparedPage[]): Promise<RewardPageResult[]> {
    this.totals.statements += 1;
    this.totals.pages += pages.length;
    try {
      return await writeRewardPages(this.#pool, this.#sql, pages, this.#eventTypes);
    } catch (error) {
      if (!dataException(error) || !pages.some((page) => page.asSent)) throw error;
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
    // The next statement goes out before the jobs of this one go on: resolved at once, they
    // would run first (BullMQ's next job, logs, the next request; the pool sends the query on
    // a later tick) and keep the database waiting. setImmediate runs them right after.
    setImmediate(() => {
      batch.forEach((entry, i) => {
        entry.resolve(results[i] ?? nothingWritten(entry.page));
      });
    });
    this.#release(batch);
  }
}
