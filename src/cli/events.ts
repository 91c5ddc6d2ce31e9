import { loadConfig } from '../config.js';
import { deliveryLag, listDeliveries, oldestEvent, replayFrom } from '../store/event-deliveries.js';
import { quoteIdentifier } from '../store/identifier.js';
import { createStore } from '../store/store.js';
import { clip, lagLine, renderTable, say } from './report.js';

export async function run({ failed = false, limit }: { failed?: boolean; limit: number }) {
  const { database, events } = loadConfig(['database', 'events']);
  const webhooks = events.webhookUrl !== undefined;
  const store = createStore(database);
  try {
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
  } finally {
    await store.close();
  }
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
