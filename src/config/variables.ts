/**
 * Every environment variable perks-worker reads, in README order, each declared once
 * (define.ts). config.ts derives the typed config and its error messages from this list; the
 * README's configuration table is `configTable()` (a unit test fails when they disagree, and
 * `npm run docs` rewrites it).
 */
import { consumerIdVariables, perksVariables } from './api.js';
import { databaseVariables, redisVariables } from './connections.js';
import type { VariableSpec } from './define.js';
import { eventsVariables } from './events.js';
import { intakeVariables } from './intake.js';
import { logVariables, workerVariables } from './worker.js';

export const variables = {
  ...perksVariables,
  ...consumerIdVariables,
  ...redisVariables,
  ...databaseVariables,
  ...workerVariables,
  ...logVariables,
  ...intakeVariables,
  ...eventsVariables,
} as const satisfies Record<string, VariableSpec>;

export type Variables = typeof variables;
export type VariableName = keyof Variables;

/** True when the variable must be set: no default, and its schema refuses undefined. */
export const isRequired = (spec: VariableSpec): boolean =>
  spec.default === undefined && !spec.schema.safeParse(undefined).success;

/** The README's configuration table, as markdown. */
export function configTable(): string {
  const rows = Object.entries(variables).map(([name, spec]: [string, VariableSpec]) => {
    const byDefault =
      spec.default !== undefined ? `\`${spec.default}\`` : isRequired(spec) ? 'required' : 'none';
    return `| \`${name}\` | ${byDefault} | ${spec.doc.replaceAll('|', '\\|')} |`;
  });
  return ['| Variable | Default | Meaning |', '|---|---|---|', ...rows].join('\n');
}
