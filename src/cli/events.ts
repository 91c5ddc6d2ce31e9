import { loadConfig } from '../config.js';
import { deliveryLag, listDeliveries, replayFrom } from '../store/event-deliveries.js';
import { quoteIdentifier } from '../store/identifier.js';
import { createStore } from '../store/store.js';
import { clip, lagLine, renderTable, say } from './report.js';

export async function run({ failed = false, limit }: { failed?: boolean; limit: number }) {
  const { database, events } = loadConfig(['database', 'events']);
  const store = createStore(database);
  try {
    const schema = quoteIdentifier(database.schema);
    const rows = await listDeliveries(store.pool, schema, { failed, limit });
    const lag = await deliveryLag(store.pool, schema);
    const table = renderTable(
      ['event', 'type', 'consumer', 'recorded at', 'delivery', 'attempts', 'last error'],
      rows.map((r) => [
        `evt_${r.id}`,
        r.type,
        r.consumer_id,
        r.created_at.toISOString(),
        r.state,
        r.attempts ?? '',
        clip(r.last_error ?? '', 120),
      ]),
    );
    const list = rows.length > 0 ? table : failed ? 'no failed events' : 'no events';
    say(list, '', lagLine(lag, events.webhookUrl !== undefined));
    return 0;
  } finally {
    await store.close();
  }
}

/** `from`: an event id, digits only. */
export async function replay({ from }: { from: string }): Promise<number> {
  const { database } = loadConfig(['database']);
  const store = createStore(database);
  try {
    const consumers = await replayFrom(store.pool, quoteIdentifier(database.schema), from);
    say(
      `replaying from evt_${from}: the events of ${consumers} consumer(s) will be delivered again, in order`,
    );
    return 0;
  } finally {
    await store.close();
  }
}
