/**
 * A worker in-process for the operations tests: test/support/worker-harness.ts plus an
 * operations server serving /metrics, with the logger and BullMQ telemetry of the test's
 * choosing.
 */
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Runtime } from '../../../src/jobs/runtime.js';
import type { Route } from '../../../src/ops/dashboard.js';
import { closeServer, type ReadinessCheck, startOpsServer } from '../../../src/ops/health.js';
import {
  type Harness,
  type HarnessOptions,
  startHarness,
  testConsumerIdKey,
} from '../../support/worker-harness.js';

export const rigConsumerIdKey = testConsumerIdKey;

export interface Rig extends Harness {
  /** Base URL of the operations server, e.g. http://127.0.0.1:43121. */
  opsUrl: string;
}

export interface RigOptions extends Omit<HarnessOptions, 'perks'> {
  /** Extra routes of the operations server, given the runtime (its queues). */
  routes?: (runtime: Runtime) => Promise<Route> | Route;
  /** Default: Redis and Postgres of the runtime. */
  checks?: (runtime: Runtime) => ReadinessCheck[];
}

/** The worker harness plus an operations server serving /metrics (and optional routes). */
export async function startRig(options: RigOptions = {}): Promise<Rig> {
  const harness = await startHarness({
    ...options,
    sandbox: { seed: 5, ...options.sandbox },
    perks: { timeoutMs: 2000 },
    worker: { jobAttempts: 2, ...options.worker },
  });
  const { runtime } = harness;
  const server: Server = await startOpsServer({
    port: 0,
    host: '127.0.0.1',
    logger: runtime.ctx.logger,
    checks: options.checks?.(runtime) ?? [
      { name: 'redis', check: async () => void (await runtime.connection.ping()) },
      { name: 'postgres', check: () => runtime.ctx.store.ping() },
    ],
    registry: runtime.metrics.registry,
    ...(options.routes ? { routes: await options.routes(runtime) } : {}),
  });
  const { port } = server.address() as AddressInfo;
  return {
    ...harness,
    opsUrl: `http://127.0.0.1:${port}`,
    async close() {
      await closeServer(server);
      await harness.close();
    },
  };
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
