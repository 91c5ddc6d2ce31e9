/**
 * Every environment variable perks-worker reads, in README order, each declared once. config.ts
 * derives the typed config and its errors from this list; `npm run docs` writes `configTable()`.
 */
import { consumerIdVariables, perksVariables } from './api.js';
import { databaseVariables, redisVariables } from './connections.js';
import type { VariableSpec } from './define.js';
import { eventsVariables } from './events.js';
import { intakeVariables } from './intake.js';
import { jobVariables, logVariables, workerVariables } from './worker.js';

export const variables = {
  ...perksVariables,
  ...consumerIdVariables,
  ...redisVariables,
  ...databaseVariables,
  ...jobVariables,
  ...workerVariables,
  ...logVariables,
  ...intakeVariables,
  ...eventsVariables,
} as const satisfies Record<string, VariableSpec>;

export type Variables = typeof variables;
export type VariableName = keyof Variables;

/** The README's configuration table, as markdown. */
export function configTable(): string {
  const rows = Object.entries(variables).map(([name, spec]: [string, VariableSpec]) => {
    // No default: required, unless the schema accepts undefined.
    const required = !spec.schema.safeParse(undefined).success;
    const byDefault =
      spec.default !== undefined ? `\`${spec.default}\`` : required ? 'required' : 'none';
    return `| \`${name}\` | ${byDefault} | ${spec.doc.replaceAll('|', '\\|')} |`;
  });
  return ['| Variable | Default | Meaning |', '|---|---|---|', ...rows].join('\n');
}
