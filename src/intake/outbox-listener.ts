/**
 * The outbox drain's wake-up: a session of its own LISTENing on the outbox channel, on
 * DATABASE_DIRECT_URL when set. It is only a shortcut, since the drain polls anyway: without it
 * (PostgreSQL away, or PgBouncer's transaction pooling, where LISTEN succeeds but its server
 * connection goes back to the pool and the notifications are dropped) signups wait for the next
 * poll, none is lost. So a failure is logged once per outage, and the session reconnects with
 * backoff, for ever.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import type { Logger } from '../ops/logger.js';
import { oncePerOutage } from '../ops/outage.js';
import { signupOutboxChannel } from '../store/outbox.js';

export interface SignupListenerOptions {
  databaseUrl: string;
  /** The schema whose outbox is drained: notifications of other schemas are ignored. */
  schema: string;
  /** Called on each notification of this schema, and on each (re)connection. */
  onSignup: () => void;
  logger: Logger;
}

export function listenForSignups(options: SignupListenerOptions): { close(): Promise<void> } {
  const { logger } = options;
  let closed = false;
  let session: pg.Client | undefined;
  let retryTimer: NodeJS.Timeout | undefined;
  let failures = 0;
  const outage = oncePerOutage((error) =>
    logger.warn(
      { err: { message: error.message } },
      'outbox LISTEN failed; polling alone until it reconnects',
    ),
  );
  // Each session is lost once: its 'error', its 'end' and a failed connect all land here.
  const lost = (client: pg.Client, error: Error) => {
    if (session !== client) return;
    session = undefined;
    client.end().catch(() => undefined);
    if (closed) return;
    outage.error(error);
    const delay = Math.min(1000 * 2 ** failures++, 30_000);
    retryTimer = setTimeout(() => void connect(), delay);
  };
  const connect = async () => {
    const client = new pg.Client({
      connectionString: options.databaseUrl,
      application_name: 'perks-worker outbox listener',
      connectionTimeoutMillis: 10_000,
      // An idle session on a dead network would otherwise wait for notifications for ever.
      keepAlive: true,
      keepAliveInitialDelayMillis: 10_000,
    });
    session = client;
    client.on('notification', (message) => {
      if (message.payload === options.schema) options.onSignup();
    });
    client.on('error', (error) => lost(client, error));
    client.on('end', () => lost(client, new Error('connection closed')));
    try {
      await client.connect();
      await client.query(`listen ${signupOutboxChannel}`);
    } catch (error) {
      return lost(client, error instanceof Error ? error : new Error(String(error)));
    }
    if (session !== client) return;
    if (failures > 0) logger.info('outbox LISTEN restored');
    failures = 0;
    outage.recovered();
    // Rows committed while nobody listened sent their notification to no one.
    options.onSignup();
  };

  void connect();
  return {
    async close() {
      closed = true;
      clearTimeout(retryTimer);
      const client = session;
      session = undefined;
      await client?.end().catch(() => undefined);
    },
  };
}

/**
 * Wakes the drain's wait early. A wake-up that comes during a pass is kept for the next wait,
 * so a row committed after the pass read the table is not left for the poll.
 */
export function createWakeup() {
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
