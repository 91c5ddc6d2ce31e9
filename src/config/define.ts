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
  'jobs',
  'worker',
  'intake',
  'events',
  'log',
] as const;

export type ConfigGroup = (typeof configGroups)[number];

export interface VariableSpec {
  /** A command loads only the groups it needs: `migrate` reads no API credentials. */
  group: ConfigGroup;
  /** Its name in the group's typed config. */
  key: string;
  /** Parses the raw string (or the default); its error message is shown after "is invalid:". */
  schema: z.ZodType;
  /** As written in the environment. Absent: required, unless the schema accepts undefined. */
  default?: string;
  /** Shown in error messages. Never a real secret. Given to `variable()`: default `default`. */
  example: string;
  /** Markdown, for the README table. */
  doc: string;
  /** Never echoed back, not even when invalid. */
  secret?: boolean;
}

type Declared = Omit<VariableSpec, 'group'>;
type Details = Pick<VariableSpec, 'default' | 'doc' | 'secret'> & { example?: string };

/** One variable of a `group()` table: its key in the typed config, its schema, the rest. */
export const variable = <const K extends string, S extends z.ZodType>(
  key: K,
  schema: S,
  details: Details,
) => ({ ...details, key, schema, example: details.example ?? details.default ?? '' });

/** The variables of one group, by name, in README order. */
export function group<const G extends ConfigGroup, T extends Record<string, Declared>>(
  group: G,
  table: T,
) {
  const entries = Object.entries(table).map(([name, spec]) => [name, { ...spec, group }]);
  return Object.fromEntries(entries) as { [N in keyof T]: T[N] & { group: G } };
}

/** Decimal digits only: `Number()` would also take `0x10`, `1e3` and `0b1`. */
export const wholeNumber = (min: number, max: number) =>
  z
    .string()
    .regex(/^[+-]?\d+$/, { error: 'must be a whole number' })
    .transform(Number)
    .pipe(
      z
        .number()
        .min(min, { error: `must be at least ${min}` })
        .max(max, { error: `must be at most ${max}` }),
    );

/** A comma list: items trimmed, empty ones dropped. */
export const commaList = (value: string) =>
  value
    .split(',')
    .map((item) => item.trim())
    .filter(Boolean);

/** A string matching `pattern`; `error` is the message when it does not. */
export const matches = (pattern: RegExp, error: string) => z.string().regex(pattern, { error });

export const listenAddress = z.union([z.ipv4(), z.ipv6(), z.literal('localhost')], {
  error: 'must be an IP address to listen on (0.0.0.0, 127.0.0.1, ::) or localhost',
});

/**
 * A URL of one of `protocol`'s schemes whose user, password and path decode: clients decode them
 * (`decodeURIComponent`), and a `%` that starts no escape would throw there, far from the variable.
 */
export const serviceUrl = (protocol: RegExp, error: string) =>
  z
    .url({ protocol, error })
    // Run after a failed url check too (zod 4): a value that is no URL is that check's to name.
    .refine((url) => !URL.canParse(url) || decodes(new URL(url)), {
      error: 'has a % that starts no escape in its user, password or path (write % as %25)',
    });

function decodes({ username, password, pathname }: URL): boolean {
  try {
    for (const part of [username, password, pathname]) decodeURIComponent(part);
    return true;
  } catch {
    return false;
  }
}

/** An absolute http(s) URL, as given: a receiver's path may end in a slash it routes on. */
export const httpUrlAsIs = serviceUrl(/^https?$/, 'must be an absolute http(s) URL');

/** A base URL, paths appended to it: without its trailing slashes. */
export const httpUrl = httpUrlAsIs.transform((url) => url.replace(/\/+$/, ''));
