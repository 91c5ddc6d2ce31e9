import { consumerIdSchema } from '../perks/schemas.js';
import { type CommandSpec, parseCommandArgs, UsageError } from './command.js';
import { producerGroups, withProducer } from './producer-session.js';

const spec: CommandSpec = {
  name: 'sync',
  config: producerGroups,
  summary:
    'Enqueue a reward sync of one consumer, known to the datastore or not (consumers enrolled\nbefore the worker existed can be synced too). A running `perks-worker work` does it.',
  positionals: ['<consumer-id>'],
  options: {},
  help: [],
};

export async function run(argv: readonly string[]): Promise<number> {
  const args = parseCommandArgs(spec, argv);
  if (!args) return 0;
  const { positionals } = args;
  const consumerId = positionals[0] ?? '';
  if (!consumerIdSchema.safeParse(consumerId).success) {
    throw new UsageError(
      `sync: <consumer-id> ${JSON.stringify(consumerId.slice(0, 120))} is not a consumer id (2 to 100 of a-z A-Z 0-9 _ -)`,
    );
  }
  const { jobId } = await withProducer((producer) =>
    producer.enqueueRewardSync({ consumerId, reason: 'manual' }),
  );
  process.stdout.write(`enqueued reward sync of consumer ${consumerId} (job ${jobId})\n`);
  return 0;
}
