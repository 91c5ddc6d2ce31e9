/**
 * Group commit of small pages (a small page costs more to plan than to run, and each statement
 * waits for its WAL flush): while `lanes` statements run, small pages queue for the next one.
 * A large page is written alone. Pages of one statement share no consumer and no reward id; a
 * page that would waits with its consumer's later pages, as does one whose consumer is being
 * written. A batch refused for its data (SQLSTATE 22, 23, 40) is retried page by page.
 */
import type pg from 'pg';
import { errorCode } from '../errors.js';
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
  maxPages: number;
  maxRows: number;
  maxSeenIds: number;
}

const maxPagesPerStatement = 100;

export const defaultWriterLimits = (poolSize: number, writers?: number): RewardWriterLimits => ({
  // The rest of the pool serves large pages and other queries.
  lanes: Math.max(1, Math.floor(poolSize / 8)),
  smallRows: 100,
  smallSeenIds: 1000,
  // Half the writers (`syncsInFlight`): the other half fetch their next page meanwhile.
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

function sqlStateClass(error: unknown): string | undefined {
  const code = errorCode(error);
  return code && /^[0-9A-Z]{5}$/.test(code) ? code.slice(0, 2) : undefined;
}

/** write_reward_pages inserts what its snapshot does not hold (its file says why). */
const insertedMeanwhile = (error: unknown) =>
  errorCode(error) === '23505' && (error as { constraint?: unknown }).constraint === 'rewards_pkey';

/** Each race needs another write of the same reward committing in between: rare, and bounded. */
const maxInsertRaces = 5;

/** 22 data exception, 23 integrity constraint, 40 transaction rollback (deadlock). */
const perPageRefusal = (error: unknown) => ['22', '23', '40'].includes(sqlStateClass(error) ?? '');

export class RewardWriter {
  readonly #pool: pg.Pool;
  readonly #sql: string;
  readonly #limits: RewardWriterLimits;
  readonly #eventTypes: readonly RewardEventType[];
  #queue: Pending[] = [];
  #running = 0;
  readonly #writing = new Set<string>();
  /** pages / statements: the batching. */
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

  #release(batch: readonly Pending[]): void {
    this.#running -= 1;
    for (const { page } of batch) this.#writing.delete(page.consumerId);
    this.#pump();
  }

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
   * Refused for a value in a body as sent: once more `reserialized`. Met a reward another
   * write inserted since its snapshot: again, when the new snapshot sees it stored.
   */
  async #statement(pages: readonly PreparedPage[]): Promise<RewardPageResult[]> {
    this.totals.pages += pages.length;
    let sent = pages;
    for (let attempt = 1; ; attempt++) {
      this.totals.statements += 1;
      try {
        return await writeRewardPages(this.#pool, this.#sql, sent, this.#eventTypes);
      } catch (error) {
        if (attempt < maxInsertRaces && insertedMeanwhile(error)) continue;
        if (sqlStateClass(error) !== '22' || !sent.some((page) => page.sent !== null)) throw error;
        sent = sent.map(reserialized);
      }
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
      // Its consumers stay held meanwhile: their later pages must not overtake.
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
    // Resolved later, so that the next statement goes out before these jobs go on.
    setImmediate(() => {
      batch.forEach((entry, i) => {
        entry.resolve(results[i] ?? nothingWritten(entry.page));
      });
    });
    this.#release(batch);
  }
}
