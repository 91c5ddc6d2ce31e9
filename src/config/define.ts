/**
 * How an environment variable is declared: once, with everything the typed config, the error
 * messages and the README table need (see variables.ts).
 */
import { z } from 'zod';

/** Every group, in README order: what `work` loads (and `check` checks). */
export const configGroups = [
  'perks',
  'consumerIds',
  'redis',
  'database',
  'worker',
  'intake',
  'events',
  'log',
] as const;

export type ConfigGroup = (typeof configGroups)[number];

export interface VariableSpec<
  G extends ConfigGroup = ConfigGroup,
  K extends string = string,
  S extends z.ZodType = z.ZodType,
> {
  /** A command loads only the groups it needs: `migrate` reads no API credentials. */
  group: G;
  /** Its name in the group's typed config. */
  key: K;
  /** Parses the raw string (or the default); its error message is shown after "is invalid:". */
  schema: S;
  /** As written in the environment. Absent: required, unless the schema accepts undefined. */
  default?: string;
  /** Shown in error messages. Never a real secret. Given to `variable()`: default `default`. */
  example: string;
  /** Markdown, for the README table. */
  description: string;
  /** Never echoed back, not even when invalid. */
  secret?: boolean;
}

export const variable = <const G extends ConfigGroup, const K extends string, S extends z.ZodType>(
  spec: Omit<VariableSpec<G, K, S>, 'example'> & { example?: string },
): VariableSpec<G, K, S> => ({ ...spec, example: spec.example ?? spec.default ?? '' });

export const wholeNumber = (min: number, max: number) =>
  z.coerce
    .number({ error: 'must be a whole number' })
    .int({ error: 'must be a whole number' })
    .min(min, { error: `must be at least ${min}` })
    .max(max, { error: `must be at most ${max}` });

export const httpUrl = z
  .url({ protocol: /^https?$/, error: 'must be an absolute http(s) URL' })
  .transform((url) => url.replace(/\/+$/, ''));
