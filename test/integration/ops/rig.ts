/**
 * The worker harness as the operations tests use it: its operations server (/metrics,
 * /readyz, /dashboard with DASHBOARD_PASSWORD) at `opsUrl`, short API timeouts, two attempts.
 */
import {
  type Harness,
  type HarnessOptions,
  startHarness,
  testConsumerIdKey,
} from '../../support/worker-harness.js';

export const rigConsumerIdKey = testConsumerIdKey;

export type Rig = Harness;

export function startRig(options: HarnessOptions = {}): Promise<Rig> {
  return startHarness({
    ...options,
    sandbox: { seed: 5, ...options.sandbox },
    env: { PERKS_TIMEOUT_MS: '2000', JOB_ATTEMPTS: '2', ...options.env },
  });
}

/** Parses a Prometheus text exposition: `name{a="1",b="2"}` (labels sorted) -> value. */
export function parseMetrics(text: string): Map<string, number> {
  const values = new Map<string, number>();
  for (const line of text.split('\n')) {
    const match = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!match) continue;
    const [, name = '', labels = '', value = ''] = match;
    const sorted = [...labels.matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)]
      .map(([, k, v]) => `${k}="${v}"`)
      .sort()
      .join(',');
    values.set(sorted ? `${name}{${sorted}}` : name, Number(value));
  }
  return values;
}

/** The key parseMetrics uses for a series. */
export function series(name: string, labels: Record<string, string> = {}): string {
  const sorted = Object.entries(labels)
    .map(([k, v]) => `${k}="${v}"`)
    .sort()
    .join(',');
  return sorted ? `${name}{${sorted}}` : name;
}

export async function scrape(opsUrl: string): Promise<Map<string, number>> {
  const response = await fetch(`${opsUrl}/metrics`);
  if (response.status !== 200) throw new Error(`/metrics answered ${response.status}`);
  return parseMetrics(await response.text());
}

/** after - before for each series (a series absent counts as 0). */
export function delta(
  before: Map<string, number>,
  after: Map<string, number>,
  name: string,
  labels: Record<string, string> = {},
): number {
  const key = series(name, labels);
  return (after.get(key) ?? 0) - (before.get(key) ?? 0);
}
