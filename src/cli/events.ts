import { loadConfig } from '../config.js';
import { deliveryLag, listDeliveries, replayFrom } from '../store/event-deliveries.js';
import { quoteIdentifier } from '../store/identifier.js';
import { createStore } from '../store/store.js';
import { type CommandSpec, parseCommandArgs, UsageError, wholeNumberOption } from './command.js';
import { clip, lagLine } from './report.js';
import { renderTable } from './table.js';

const listSpec = {
  name: 'events',
  config: ['database', 'events'],
  summary:
    'List the latest reward events with their webhook delivery state (delivered, pending,\nfailed), newest first. `perks-worker events replay --from <id>` delivers again from an id.',
  options: {
    failed: { type: 'boolean' },
    limit: { type: 'string' },
  },
  help: [
    '--failed               only the events given up after WEBHOOK_MAX_AGE_HOURS',
    '--limit N              how many to list (default 20, at most 10000)',
  ],
} satisfies CommandSpec;

const replaySpec = {
  name: 'events replay',
  config: ['database'],
  summary:
    'Deliver every event from an id on again: the consumers concerned go back before it, and a\nrunning `perks-worker work` with WEBHOOK_URL set delivers them in order.',
  options: { from: { type: 'string' } },
  help: ['--from ID              the first event id to deliver again (required)'],
} satisfies CommandSpec;

export async function run(argv: readonly string[]): Promise<number> {
  if (argv[0] === 'replay') return replay(argv.slice(1));
  const args = parseCommandArgs(listSpec, argv);
  if (!args) return 0;
  const limit = wholeNumberOption(listSpec, args.values.limit, '--limit', 1, 10_000) ?? 20;
  const { database, events } = loadConfig(['database', 'events']);
  const store = createStore(database);
  try {
    const schema = quoteIdentifier(database.schema);
    const rows = await listDeliveries(store.pool, schema, {
      failed: args.values.failed === true,
      limit,
    });
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
    const lines = [rows.length > 0 ? table : args.values.failed ? 'no failed events' : 'no events'];
    lines.push('', lagLine(lag, events.webhookUrl !== undefined));
    process.stdout.write(`${lines.join('\n')}\n`);
    return 0;
  } finally {
    await store.close();
  }
}

async function replay(argv: readonly string[]): Promise<number> {
  const args = parseCommandArgs(replaySpec, argv);
  if (!args) return 0;
  const from = args.values.from?.replace(/^evt_/, '');
  if (from === undefined) throw new UsageError('events replay: --from <event id> is required');
  wholeNumberOption(replaySpec, from, '--from', 1, Number.MAX_SAFE_INTEGER);
  const { database } = loadConfig(['database']);
  const store = createStore(database);
  try {
    const consumers = await replayFrom(store.pool, quoteIdentifier(database.schema), from);
    process.stdout.write(
      `replaying from evt_${from}: the events of ${consumers} consumer(s) will be delivered again, in order\n`,
    );
    return 0;
  } finally {
    await store.close();
  }
}
