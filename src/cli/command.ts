/**
 * Transitional, for work.ts and demo.ts only: they still parse the argv that program.ts
 * rebuilds from the options commander has already checked. Delete this file once their `run`
 * takes WorkOptions and DemoOptions (program.ts).
 */
import { type ParseArgsConfig, parseArgs } from 'node:util';
import type { ConfigGroup } from '../config.js';

type OptionSpecs = NonNullable<ParseArgsConfig['options']>;

export interface CommandSpec<O extends OptionSpecs = OptionSpecs> {
  name: string;
  summary: string;
  options: O;
  help: readonly string[];
  config?: readonly ConfigGroup[];
}

export function parseCommandArgs<O extends OptionSpecs>(
  spec: CommandSpec<O>,
  argv: readonly string[],
): ReturnType<typeof parseArgs<{ options: O; strict: true }>> {
  return parseArgs({ args: [...argv], options: spec.options, strict: true });
}

export function wholeNumberOption(
  _spec: unknown,
  raw: string | undefined,
  ..._checkedByCommander: unknown[]
): number | undefined {
  return raw === undefined ? undefined : Number(raw);
}
