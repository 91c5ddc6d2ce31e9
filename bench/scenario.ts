/** What every scenario is given and gives back. */
import type { BenchRun } from './lab.js';

export interface BenchContext {
  run: BenchRun;
  quick: boolean;
  /** Scenario 5's N (consumers fanned out), when --fanout overrides the default. */
  fanout: number | undefined;
  /** Progress for the person watching (stderr); results go through ScenarioResult. */
  note(message: string): void;
}

export interface ScenarioResult {
  id: number;
  title: string;
  /** What was measured: sizes, latency, concurrency. */
  inputs: Record<string, string | number>;
  /** Measured figures, already rounded and with their unit in the key. */
  figures: Record<string, string | number>;
  /** The scenario's headline ratio (the JSON's `scenarioN`). */
  ratio: number;
  goal: string;
  /** Further ratios with their own goal, reported in the JSON as `scenarioN<Name>`. */
  extraRatios?: Record<string, { ratio: number; goal: string }>;
  /**
   * CPU steal while the scenario ran, in percent of the cores' time (run.ts measures it): on
   * a shared host, time the hypervisor gave to other machines. Its figures are less reliable
   * the higher it is.
   */
  stealPercent?: number;
}

export interface Scenario {
  id: number;
  title: string;
  run(ctx: BenchContext): Promise<ScenarioResult>;
}

export function round(value: number, digits = 3): number {
  const factor = 10 ** digits;
  return Math.round(value * factor) / factor;
}

/** Rates are printed as whole numbers with thousands separators. */
export function perSecond(count: number, ms: number): number {
  return Math.round((count * 1000) / Math.max(ms, 1));
}
