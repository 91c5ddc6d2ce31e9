/**
 * The outbox drain: the rows services add to <schema>.signup_outbox in their own transactions
 * become enrollment jobs. A batch is a transaction: claim rows `for update skip locked` (replicas
 * share them), enqueue the valid ones while locked, mark every row (job id, or the error naming
 * the field), commit. A row is enqueued at least once: if Redis refuses or the process dies
 * before the commit, the next pass enqueues it again, and deduplication (or a 409) absorbs it.
 * A pass runs on a NOTIFY (outbox-listener.ts) or every `pollMs`, never two at once, repeating
 * while batches are full; after a failure it backs off, deaf to notifications, so as not to spin.
 */
import type pg from 'pg';
import { oncePerOutage } from '../ops/outage.js';
import { withTimeout } from '../ops/timeouts.js';
import { describeProblems, type EnrollmentPayload } from '../queues/payloads.js';
import { enqueueEnrollments } from '../queues/producer.js';
import { assertSchemaName, quoteIdentifier } from '../store/identifier.js';
import {
  claimWaitingSignups,
  deleteProcessedSignups,
  markSignupsProcessed,
  type OutboxOutcome,
} from '../store/outbox.js';
import { inTransaction } from '../store/transaction.js';
import { createWakeup, listenForSignups } from './outbox-listener.js';
import { checkSignup, type Door } from './signups.js';

export interface OutboxOptions extends Door {
  /** Pool the batches run on, a transaction each (fine through PgBouncer's transaction pooling). */
  pool: pg.Pool;
  /** URL of the LISTEN session: a direct one (DATABASE_DIRECT_URL), see outbox-listener.ts. */
  databaseUrl: string;
  /** Schema holding signup_outbox (DATABASE_SCHEMA). */
  schema: string;
  /** Longest wait between two passes when no notification comes (OUTBOX_POLL_MS). */
  pollMs: number;
  /** Processed rows older than this many days are deleted (OUTBOX_RETENTION_DAYS). */
  retentionDays: number;
  /** Rows claimed per transaction. Default 500. */
  batchSize?: number;
  /** Default true: LISTEN for the insert trigger's NOTIFY; false: polling alone. */
  listen?: boolean;
}

export interface OutboxDrain {
  /** Drains until no row is waiting (after any pass in progress); returns the rows processed. */
  drainNow(): Promise<number>;
  /** Stops polling and listening; waits for a pass in progress (up to 10 s on a silent Redis). */
  close(): Promise<void>;
}

const defaultBatchSize = 500;
/** How long a batch waits for Redis before it is rolled back. */
const enqueueTimeoutMs = 10_000;
const maxBackoffMs = 10_000;
/** Rows deleted per statement: a long retention backlog is deleted a batch per pass. */
const retentionBatchSize = 1000;
const retentionIntervalMs = 10 * 60_000;

export function startOutboxDrain(options: OutboxOptions): OutboxDrain {
  const { logger, pollMs } = options;
  const drainer: Drainer = {
    ...options,
    schema: quoteIdentifier(assertSchemaName(options.schema)),
    batchSize: options.batchSize ?? defaultBatchSize,
  };
  const closing = new AbortController();
  const wakeup = createWakeup();
  const deleteExpired = retention(drainer, options.retentionDays);
  let queue: Promise<unknown> = Promise.resolve();
  /** Runs `work` after every pass already started: never two at once in this process. */
  const exclusively = <T>(work: () => Promise<T>): Promise<T> => {
    const result = queue.then(work);
    queue = result.catch(() => undefined);
    return result;
  };
  const drainUntilEmpty = async (): Promise<number> => {
    let total = 0;
    for (;;) {
      const processed = await drainBatch(drainer);
      total += processed;
      if (processed < drainer.batchSize || closing.signal.aborted) return total;
    }
  };
  const outage = oncePerOutage((error) =>
    logger.warn(
      { err: { message: error.message } },
      'outbox drain failed; the rows wait for the next pass',
    ),
  );
  const run = async () => {
    let failures = 0;
    while (!closing.signal.aborted) {
      try {
        await exclusively(async () => {
          await deleteExpired();
          await drainUntilEmpty();
        });
        if (failures > 0) logger.info('outbox drain recovered');
        failures = 0;
        outage.recovered();
      } catch (error) {
        failures++;
        if (!closing.signal.aborted) outage.error(asError(error));
      }
      const backoff = Math.min(pollMs * 2 ** (failures - 1), Math.max(pollMs, maxBackoffMs));
      await wakeup.wait(failures === 0 ? pollMs : backoff, failures === 0, closing.signal);
    }
  };

  const running = run();
  const listener =
    options.listen === false ? undefined : listenForSignups({ ...options, onSignup: wakeup.wake });
  return {
    drainNow: () => exclusively(drainUntilEmpty),
    async close() {
      closing.abort(new Error('outbox drain closed'));
      await Promise.all([running, listener?.close()]);
    },
  };
}

/** What one batch needs; `schema` is quoted. */
type Drainer = Door & { pool: pg.Pool; schema: string; batchSize: number };

/** Deletes processed rows past their retention, a batch a pass, at most every ten minutes. */
function retention(d: Drainer, retentionDays: number): () => Promise<void> {
  let dueAt = 0;
  return async () => {
    if (Date.now() < dueAt) return;
    const limit = retentionBatchSize;
    const deleted = await deleteProcessedSignups(d.pool, d.schema, { retentionDays, limit });
    if (deleted > 0) d.logger.info({ deleted, retentionDays }, 'old outbox rows deleted');
    // A full batch means more are due: the next pass deletes another one.
    dueAt = deleted === limit ? 0 : Date.now() + retentionIntervalMs;
  };
}

/** One batch, one transaction; returns the rows claimed. On any failure the rows stay waiting. */
async function drainBatch(d: Drainer): Promise<number> {
  const startedAt = Date.now();
  const batch = await inTransaction(d.pool, async (client) => {
    const rows = await claimWaitingSignups(client, d.schema, d.batchSize);
    const valid: { id: string; payload: EnrollmentPayload }[] = [];
    const refused: OutboxOutcome[] = [];
    for (const { id, ...signup } of rows) {
      const checked = checkSignup(signup, d.consumerIdKey);
      if (checked.ok) valid.push({ id, payload: checked.value });
      else refused.push({ id, error: describeProblems(checked.problems) });
    }
    const payloads = valid.map((v) => v.payload);
    const enqueued = await withTimeout(enqueueEnrollments(d.queues, payloads), enqueueTimeoutMs);
    const marked = valid.map(({ id }, i) => ({ id, jobId: enqueued[i]?.jobId ?? '' }));
    await markSignupsProcessed(client, d.schema, [...marked, ...refused]);
    return { rows: rows.length, enqueued, refused: refused.map((r) => r.id) };
  });
  if (batch.rows === 0) return 0;
  const duplicate = batch.enqueued.filter((e) => e.alreadyPending).length;
  const accepted = batch.enqueued.length - duplicate;
  const rejected = batch.refused.length;
  d.metrics.intake('outbox', 'accepted', accepted);
  d.metrics.intake('outbox', 'duplicate', duplicate);
  d.metrics.intake('outbox', 'rejected', rejected);
  const counts = { rows: batch.rows, accepted, duplicate, rejected };
  d.logger.info({ ...counts, durationMs: Date.now() - startedAt }, 'outbox batch enqueued');
  if (rejected > 0) d.logger.warn({ ids: batch.refused }, 'outbox rows refused; see their error');
  return batch.rows;
}

const asError = (error: unknown) => (error instanceof Error ? error : new Error(String(error)));
