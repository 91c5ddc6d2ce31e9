/**
 * The outbox drain: rows services add to <schema>.signup_outbox become enrollment jobs. A batch
 * is a transaction: claim rows `for update skip locked` (replicas share them), enqueue the valid
 * ones while locked, mark every row (job id, or the error), commit. At least once: a row whose
 * commit Redis or a crash prevented is enqueued again, and deduplication (or a 409) absorbs it.
 * A pass runs on a NOTIFY or every `pollMs`, never two at once, repeating while batches are
 * full; after a failure it backs off, deaf to notifications, so as not to spin.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { outageLogger } from '../ops/outage.js';
import { withTimeout } from '../ops/timeouts.js';
import { describeProblems, type EnrollmentPayload } from '../queues/payloads.js';
import { enqueueEnrollments } from '../queues/producer.js';
import { assertSchemaName, quoteIdentifier } from '../store/identifier.js';
import {
  claimWaitingSignups,
  deleteProcessedSignups,
  markSignupsProcessed,
  type OutboxOutcome,
  signupOutboxChannel,
} from '../store/outbox.js';
import { inTransaction } from '../store/transaction.js';
import { checkSignup, type Door, onlyKeyMissing } from './signups.js';

export interface OutboxOptions extends Door {
  /** Pool the batches run on, a transaction each (fine through PgBouncer's transaction pooling). */
  pool: pg.Pool;
  /** URL of the LISTEN session: a direct one (DATABASE_DIRECT_URL), see listenForSignups. */
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
  /** How long a batch waits for Redis before it is rolled back. Default 10 000. */
  enqueueTimeoutMs?: number;
}

const maxBackoffMs = 10_000;
/** Rows deleted per statement: a long retention backlog is deleted a batch per pass. */
const retentionBatchSize = 1000;
const retentionIntervalMs = 10 * 60_000;

export type OutboxDrain = ReturnType<typeof startOutboxDrain>;

export function startOutboxDrain(options: OutboxOptions) {
  const { logger, pollMs } = options;
  const drainer: Drainer = {
    ...options,
    schema: quoteIdentifier(assertSchemaName(options.schema)),
    batchSize: options.batchSize ?? 500,
    enqueueTimeoutMs: options.enqueueTimeoutMs ?? 10_000,
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
  const outage = outageLogger(logger, 'outbox drain failed; the rows wait for the next pass');
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
        if (!closing.signal.aborted) outage.error(error);
      }
      const backoff = Math.min(pollMs * 2 ** (failures - 1), Math.max(pollMs, maxBackoffMs));
      await wakeup.wait(failures === 0 ? pollMs : backoff, failures === 0, closing.signal);
    }
  };

  if (!options.consumerIdKey) {
    logger.info(
      'outbox: rows whose user_id is not a consumer id wait for a replica with PERKS_CONSUMER_ID_KEY',
    );
  }
  const running = run();
  const listener = options.listen === false ? undefined : listenForSignups(options, wakeup.wake);
  return {
    /** Drains until no row is waiting (after any pass in progress); returns the rows processed. */
    drainNow: () => exclusively(drainUntilEmpty),
    /** Stops polling and listening; waits for a pass in progress (up to 10 s on a silent Redis). */
    async close(): Promise<void> {
      closing.abort(new Error('outbox drain closed'));
      await Promise.all([running, listener?.close()]);
    },
  };
}

/** What one batch needs; `schema` is quoted. */
type Drainer = Door & {
  pool: pg.Pool;
  schema: string;
  batchSize: number;
  enqueueTimeoutMs: number;
};

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
    // The batch's session is idle only while it waits on Redis. A replica whose host vanished
    // (no FIN, no RST) would otherwise hold its rows' locks until the server's TCP keepalive
    // gives up, two hours by default: PostgreSQL ends the session, and another replica drains.
    const idleMs = 2 * d.enqueueTimeoutMs;
    await client.query(`set local idle_in_transaction_session_timeout = ${idleMs}`);
    const rows = await claimWaitingSignups(client, d.schema, d.batchSize, Boolean(d.consumerIdKey));
    const valid: { id: string; payload: EnrollmentPayload }[] = [];
    const refused: OutboxOutcome[] = [];
    for (const { id, ...signup } of rows) {
      const checked = checkSignup(signup, d.consumerIdKey);
      if (checked.ok) valid.push({ id, payload: checked.value });
      // Claimed only with the key (claim_waiting_signups.sql), as the checks agree; else it is
      // left waiting, unmarked, for a replica with the key.
      else if (!onlyKeyMissing(checked.problems))
        refused.push({ id, error: describeProblems(checked.problems) });
    }
    const payloads = valid.map((v) => v.payload);
    const enqueued = await withTimeout(enqueueEnrollments(d.queues, payloads), d.enqueueTimeoutMs);
    const marked = valid.map(({ id }, i) => ({ id, jobId: enqueued[i]?.jobId ?? '' }));
    await markSignupsProcessed(client, d.schema, [...marked, ...refused]);
    return { rows: rows.length, enqueued, refused: refused.map((r) => r.id) };
  });
  if (batch.rows === 0) return 0;
  const duplicate = batch.enqueued.filter((e) => e.alreadyPending).length;
  const counts = { accepted: batch.enqueued.length - duplicate, duplicate };
  const rejected = batch.refused.length;
  d.metrics.intake('outbox', 'accepted', counts.accepted);
  d.metrics.intake('outbox', 'duplicate', duplicate);
  d.metrics.intake('outbox', 'rejected', rejected);
  const durationMs = Date.now() - startedAt;
  d.logger.info({ rows: batch.rows, ...counts, rejected, durationMs }, 'outbox batch enqueued');
  if (rejected > 0) d.logger.warn({ ids: batch.refused }, 'outbox rows refused; see their error');
  return batch.rows;
}

/**
 * The drain's wake-up, a LISTEN session of its own, is only a shortcut: without it (PostgreSQL
 * away, or PgBouncer's transaction pooling, which drops notifications) signups wait for the
 * poll. So it reconnects for ever; `onSignup` runs per notification of this schema and per
 * (re)connection.
 */
function listenForSignups(
  { databaseUrl, schema, logger }: OutboxOptions,
  onSignup: () => void,
): { close(): Promise<void> } {
  const closing = new AbortController();
  let session: pg.Client | undefined;
  const outage = outageLogger(logger, 'outbox LISTEN failed; polling alone until it reconnects');
  const listen = async () => {
    for (let failures = 0; !closing.signal.aborted; ) {
      const client = new pg.Client({
        connectionString: databaseUrl,
        application_name: 'perks-worker outbox listener',
        connectionTimeoutMillis: 10_000,
        // An idle session on a dead network would otherwise wait for notifications for ever.
        keepAlive: true,
        keepAliveInitialDelayMillis: 10_000,
      });
      session = client;
      // A session is lost once: by its first 'error' or 'end', or a failed connect.
      const lost = new Promise<Error>((resolve) => {
        client.on('error', resolve);
        client.on('end', () => resolve(new Error('connection closed')));
      });
      client.on('notification', (message) => {
        if (message.payload === schema) onSignup();
      });
      const listening = client.connect().then(() => client.query(`listen ${signupOutboxChannel}`));
      const error = await listening
        .then(() => {
          if (failures > 0) logger.info('outbox LISTEN restored');
          failures = 0;
          outage.recovered();
          // Rows committed while nobody listened sent their notification to no one.
          onSignup();
          return lost;
        })
        .catch((failure: unknown) => failure);
      client.end().catch(() => undefined);
      if (closing.signal.aborted) return;
      outage.error(error);
      const delay = Math.min(1000 * 2 ** failures++, 30_000);
      await sleep(delay, undefined, { signal: closing.signal }).catch(() => undefined);
    }
  };

  void listen();
  return {
    async close() {
      closing.abort();
      await session?.end().catch(() => undefined);
    },
  };
}

/** Wakes the drain's wait early; one during a pass is kept for the next wait (rows it missed). */
function createWakeup() {
  let pending = false;
  let early: AbortController | undefined;
  return {
    wake(): void {
      pending = true;
      early?.abort();
    },
    /** Waits `ms`, or until a wake-up when `wakeable`, or until `signal` aborts. */
    async wait(ms: number, wakeable: boolean, signal: AbortSignal): Promise<void> {
      if (!(wakeable && pending) && !signal.aborted) {
        const stop = new AbortController();
        const abort = () => stop.abort();
        signal.addEventListener('abort', abort, { once: true });
        if (wakeable) early = stop;
        await sleep(ms, undefined, { signal: stop.signal }).catch(() => undefined);
        signal.removeEventListener('abort', abort);
        early = undefined;
      }
      pending = false;
    },
  };
}
