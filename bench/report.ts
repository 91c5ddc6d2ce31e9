/** Printing results: one block per scenario, the summary table, the RESULTS.md entry, the JSON. */
import { appendFile } from 'node:fs/promises';
import type { MachineDescription } from './env.js';
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

/** A Markdown table: scenario, ratio, goal, figures. */
export function markdownTable(results: readonly ScenarioResult[]): string {
  const rows = ['| # | Scenario | Ratio | Goal | Inputs | Figures |', '|---|---|---|---|---|---|'];
  for (const r of results) {
    rows.push(
      `| ${r.id} | ${r.title} | **${r.ratio}** | ${r.goal} | ${entries(r.inputs).join('; ')} | ${entries(withSteal(r)).join('; ')} |`,
    );
    for (const [name, extra] of Object.entries(r.extraRatios ?? {})) {
      rows.push(`| ${r.id} | ${r.title} (${name}) | **${extra.ratio}** | ${extra.goal} | | |`);
    }
  }
  return rows.join('\n');
}

const withSteal = (r: ScenarioResult) =>
  r.stealPercent === undefined ? r.figures : { ...r.figures, 'CPU steal %': r.stealPercent };

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

export async function appendResults(
  file: URL,
  run: {
    startedAt: Date;
    quick: boolean;
    scenarios: readonly number[];
    durationS: number;
    stealPercent: number | undefined;
  },
  machine: MachineDescription,
  results: readonly ScenarioResult[],
  failures: readonly ScenarioFailure[] = [],
): Promise<void> {
  const kind = run.quick ? 'quick run' : 'full run';
  const text = [
    '',
    `### ${run.startedAt.toISOString()}: ${kind}, scenarios ${run.scenarios.join(', ')} (${run.durationS} s)`,
    '',
    `Machine: ${machine.cpu}, ${machine.cores} cores, ${machine.memoryGiB} GiB, ${machine.os}; ` +
      `Node ${machine.node}, Redis ${machine.redis}, PostgreSQL ${machine.postgres}. ` +
      `Load average at start ${machine.loadAtStart}; ${machine.otherTestProcesses} other vitest processes running` +
      (run.stealPercent === undefined ? '.' : `; CPU steal over the run ${run.stealPercent}%.`),
    '',
    markdownTable(results),
    '',
    ...failures.map((failure) => `${formatFailure(failure)}\n`),
    '```json',
    JSON.stringify(ratiosJson(results)),
    '```',
    '',
  ].join('\n');
  await appendFile(file, text);
}
