import { type CommandSpec, parseCommandArgs } from './command.js';
import { withProducer } from './producer-session.js';

const spec: CommandSpec = {
  name: 'reconcile',
  summary:
    'Start a reconciliation now: every enrolled consumer gets a reward sync. If one is already\npending or running, it is not started twice.',
  options: {},
  help: [],
};

export async function run(argv: readonly string[]): Promise<number> {
  if (!parseCommandArgs(spec, argv)) return 0;
  const { jobId, started } = await withProducer((producer) => producer.startReconciliation());
  process.stdout.write(
    started
      ? `started reconciliation (job ${jobId})\n`
      : `a reconciliation is already pending or running (job ${jobId}); not started again\n`,
  );
  return 0;
}
