/** Printing results: one block per scenario, the summary table, the JSON line. */
import type { ScenarioResult } from './scenario.js';

const entries = (record: Record<string, string | number>) =>
  Object.entries(record).map(
    ([k, v]) => `${k} ${typeof v === 'number' ? v.toLocaleString('en-US') : v}`,
  );

/** The block printed when a scenario ends: its inputs, its figures, its ratio. */
export function formatScenario(result: ScenarioResult): string {
  const lines = [
    `scenario ${result.id}: ${result.title}`,
    `  inputs:  ${entries(result.inputs).join(', ')}`,
    `  figures: ${entries(result.figures).join(', ')}`,
    `  ratio:   ${result.ratio} (goal ${result.goal})`,
  ];
  for (const [name, extra] of Object.entries(result.extraRatios ?? {})) {
    lines.push(`  ratio ${name}: ${extra.ratio} (goal ${extra.goal})`);
  }
  if (result.stealPercent !== undefined) lines.push(`  steal:   ${stealNote(result.stealPercent)}`);
  return lines.join('\n');
}

/** A scenario that threw: the run reports it and goes on with the others. */
export interface ScenarioFailure {
  id: number;
  title: string;
  message: string;
}

/** On one line (a child's stderr can be many), at most 500 characters of the message. */
export const formatFailure = (failure: ScenarioFailure) =>
  `scenario ${failure.id}: ${failure.title} FAILED: ${failure.message.replace(/\s*\n\s*/g, ' ').slice(0, 500)}`;

/** From this much CPU steal on, a scenario's figures are flagged as less reliable. */
const noisyStealPercent = 5;

function stealNote(percent: number): string {
  const note = `${percent}% of the cores' time went to other machines on the host (CPU steal)`;
  return percent >= noisyStealPercent ? `${note}: these figures are less reliable` : note;
}

/** The JSON of the last line: `scenarioN` for each headline ratio, `scenarioN<Name>` for the others. */
export function ratiosJson(results: readonly ScenarioResult[]): Record<string, number> {
  const json: Record<string, number> = {};
  for (const r of results) {
    json[`scenario${r.id}`] = r.ratio;
    for (const [name, extra] of Object.entries(r.extraRatios ?? {})) {
      json[`scenario${r.id}${name}`] = extra.ratio;
    }
  }
  return json;
}

/** The plain-text summary table printed at the end of a run. */
export function textTable(results: readonly ScenarioResult[]): string {
  const rows: string[][] = [['#', 'scenario', 'ratio', 'steal %', 'goal']];
  for (const r of results) {
    rows.push([String(r.id), r.title, String(r.ratio), String(r.stealPercent ?? ''), r.goal]);
    for (const [name, extra] of Object.entries(r.extraRatios ?? {})) {
      rows.push([String(r.id), `${r.title} (${name})`, String(extra.ratio), '', extra.goal]);
    }
  }
  const widths = rows[0]?.map((_, i) => Math.max(...rows.map((row) => row[i]?.length ?? 0))) ?? [];
  return rows
    .map((row) =>
      row
        .map((cell, i) => cell.padEnd(widths[i] ?? 0))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}
