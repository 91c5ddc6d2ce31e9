import { type ParseArgsConfig, parseArgs } from 'node:util';
import { distance } from 'fastest-levenshtein';
import type { VariableSpec } from '../config/define.js';
import { type ConfigGroup, variables } from '../config.js';

/** A command-line mistake: printed as one line, exit status 2, no stack trace. */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}

export type OptionSpecs = NonNullable<ParseArgsConfig['options']>;

export interface CommandSpec<O extends OptionSpecs = OptionSpecs> {
  name: string;
  summary: string;
  /** Positional arguments, e.g. `<consumer-id>`; shown in the usage line. */
  positionals?: readonly string[];
  /** The command's own options; -h/--help is every command's, added by parseCommandArgs. */
  options: O;
  /** One line per option, in the order shown by --help. */
  help: readonly string[];
  /** The configuration groups the command loads: --help lists their variables. */
  config?: readonly ConfigGroup[];
}

const helpOption = { help: { type: 'boolean', short: 'h' } } as const;

export interface ParsedArgs<O extends OptionSpecs> {
  values: ReturnType<
    typeof parseArgs<{ options: O; allowPositionals: true; strict: true }>
  >['values'];
  positionals: string[];
}

/**
 * Strict parsing: an unknown flag, a missing value or a stray argument is a UsageError. With
 * -h/--help it writes the usage to `out` and returns undefined: the command exits 0.
 */
export function parseCommandArgs<O extends OptionSpecs>(
  spec: CommandSpec<O>,
  argv: readonly string[],
  out: NodeJS.WritableStream = process.stdout,
): ParsedArgs<O> | undefined {
  let parsed: ParsedArgs<O>;
  try {
    parsed = parseArgs({
      args: [...argv],
      options: { ...spec.options, ...helpOption },
      allowPositionals: true,
      strict: true,
    }) as ParsedArgs<O>;
  } catch (error) {
    // Node appends advice about `--` to unknown options; the first sentence is the point.
    const message = (error as Error).message.split('\n')[0]?.split('. To specify')[0] ?? '';
    throw new UsageError(`${spec.name}: ${message}${nearestOption(spec, message)}`);
  }
  // `--help` answers even when the rest of the line is incomplete.
  if ((parsed.values as { help?: unknown }).help === true) {
    out.write(`${usage(spec)}\n`);
    return undefined;
  }
  const expected = spec.positionals ?? [];
  if (parsed.positionals.length > expected.length) {
    const extra = parsed.positionals.slice(expected.length).join(' ');
    throw new UsageError(`${spec.name}: unexpected argument ${JSON.stringify(extra)}`);
  }
  const missing = expected.slice(parsed.positionals.length);
  if (missing.length > 0) throw new UsageError(`${spec.name}: missing ${missing.join(' ')}`);
  return parsed;
}

/** `; did you mean --json?` for an unknown option close to one of the command's. */
function nearestOption(spec: CommandSpec, message: string): string {
  const unknown = /^Unknown option '(--[^']+)'/.exec(message)?.[1];
  if (!unknown) return '';
  const known = [...Object.keys(spec.options), 'help'].map((name) => `--${name}`);
  const [nearest] = known
    .map((option) => ({ option, away: distance(unknown, option) }))
    .sort((a, b) => a.away - b.away);
  return nearest && nearest.away <= 2 ? `; did you mean ${nearest.option}?` : '';
}

export function usage(spec: CommandSpec): string {
  const args = ['perks-worker', spec.name, ...(spec.positionals ?? []), '[options]'].join(' ');
  const lines = [
    `Usage: ${args}`,
    '',
    spec.summary,
    '',
    'Options:',
    ...spec.help.map((l) => `  ${l}`),
  ];
  lines.push('  -h, --help             show this help');
  const env = environmentOf(spec.config ?? []);
  if (env.length > 0) {
    lines.push('', 'Environment (docs/configuration.md):', ...wrap(env.join(', '), 96));
  }
  return lines.join('\n');
}

/** The variables of `groups`, in the configuration table's order. */
export function environmentOf(groups: readonly ConfigGroup[]): string[] {
  return Object.entries(variables as Record<string, VariableSpec>)
    .filter(([, v]) => groups.includes(v.group))
    .map(([name]) => name);
}

/** Words of `text` in lines of at most `width` characters, each indented by two spaces. */
function wrap(text: string, width: number): string[] {
  const lines: string[] = [];
  let line = '';
  for (const word of text.split(' ')) {
    if (line && line.length + word.length + 1 > width) {
      lines.push(`  ${line}`);
      line = word;
    } else line = line ? `${line} ${word}` : word;
  }
  if (line) lines.push(`  ${line}`);
  return lines;
}

/**
 * A whole-number option: undefined when not given; anything but digits, or a value outside
 * [min, max], is a UsageError naming the command, the flag and the value.
 */
export function wholeNumberOption(
  spec: Pick<CommandSpec, 'name'>,
  raw: string | undefined,
  flag: string,
  min: number,
  max: number,
): number | undefined {
  if (raw === undefined) return undefined;
  const value = Number(raw);
  if (!/^\d+$/.test(raw) || value < min || value > max) {
    throw new UsageError(
      `${spec.name}: ${flag} must be a whole number from ${min} to ${max}, got ${JSON.stringify(raw)}`,
    );
  }
  return value;
}
