import { type DatabaseConfig, loadConfig, redactUrl } from '../config.js';
import { clip } from '../errors.js';
import { DatastoreUnavailableError, datastoreProblem } from '../store/errors.js';
import { deliveryLag, listDeliveries, oldestEvent, replayFrom } from '../store/event-deliveries.js';
import { quoteIdentifier } from '../store/identifier.js';
import { createStore, type Store } from '../store/store.js';
import { lagLine, renderTable, say } from './report.js';

/** The datastore's errors as one line: a server down or a schema not migrated is no bug. */
async function withStore<T>(database: DatabaseConfig, work: (store: Store) => Promise<T>) {
  const store = createStore(database);
  try {
    return await work(store);
  } catch (error) {
    const why = datastoreProblem(error, database.schema);
    const message = `datastore ${redactUrl(database.url)}: unavailable (${why})`;
    throw new DatastoreUnavailableError(message, { cause: error });
  } finally {
    await store.close();
  }
}

export async function run({ failed = false, limit }: { failed?: boolean; limit: number }) {
  const { database, events } = loadConfig(['database', 'events']);
  const webhooks = events.webhookUrl !== undefined;
  return withStore(database, async (store) => {
    const schema = quoteIdentifier(database.schema);
    const rows = await listDeliveries(store.pool, schema, { failed, limit });
    const lag = await deliveryLag(store.pool, schema);
    const oldest = await oldestEvent(store.pool, schema);
    const table = renderTable(
      ['event', 'type', 'consumer', 'recorded at', 'delivery', 'attempts', 'last error'],
      rows.map((r) => [
        `evt_${r.id}`,
        r.type,
        r.consumer_id,
        r.created_at.toISOString(),
        // Without webhooks nothing is on its way: not "pending".
        webhooks || r.state !== 'pending' ? r.state : 'not sent',
        r.attempts ?? '',
        clip(r.last_error ?? '', 120),
      ]),
    );
    const list = rows.length > 0 ? table : failed ? 'no failed events' : 'no events';
    const days = events.retentionDays;
    const retention = days === undefined ? 'off (events kept for ever)' : `${days} days`;
    const kept = oldest ? `${oldest.createdAt.toISOString()} (evt_${oldest.id})` : 'none';
    say(list, '', lagLine(lag, webhooks), `retention: ${retention}, oldest event kept: ${kept}`);
    return 0;
  });
}

/** `from`: an event id, digits only. */
export async function replay({ from }: { from: string }): Promise<number> {
  const { database, events } = loadConfig(['database', 'events']);
  if (events.webhookUrl === undefined) {
    say(
      'webhooks are not configured (WEBHOOK_URL and WEBHOOK_SECRET unset): nothing will be delivered, nothing replayed',
    );
    return 1;
  }
  return withStore(database, async (store) => {
    const consumers = await replayFrom(store.pool, quoteIdentifier(database.schema), from);
    say(
      `replaying from evt_${from}: the events of ${consumers} consumer(s) will be delivered again, in order`,
    );
    return 0;
  });
}
