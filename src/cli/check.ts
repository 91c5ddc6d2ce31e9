import { type CommandSpec, parseCommandArgs } from './command.js';

const spec: CommandSpec = {
  name: 'check',
  summary: 'Check the configuration and every service the worker needs, before running it.',
  options: {},
  help: [],
};

export async function run(argv: readonly string[]): Promise<number> {
  if (!parseCommandArgs(spec, argv)) return 0;
  throw new Error('check: not implemented yet');
}
