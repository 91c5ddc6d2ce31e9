/**
 * The operations server of the real `perks-worker work` process: health, readiness, metrics
 * after a job, the dashboard behind basic auth (or absent without a password) and the
 * dashboard rendered in headless Chromium by scripts/dashboard-screenshot.sh. .ci/run installs
 * Chromium; under CI its absence fails that test, elsewhere it skips.
 */
import { type ChildProcess, execFile, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Producer } from '../../src/queues/producer.js';
import { bin, type ProcessRig, startProcessRig } from '../support/processes.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const password = 'e2e-dashboard-password';
const chromium = ['chromium', 'chromium-browser'].some(
  (name) => spawnSync('sh', ['-c', `command -v ${name}`]).status === 0,
);
const inCi = ['true', '1'].includes(process.env.CI ?? '');

let rig: ProcessRig | undefined;
let producer: Producer;
const children: ChildProcess[] = [];

beforeAll(async () => {
  rig = await startProcessRig({ sandbox: { seed: 21, rewardsOnEnroll: 12 } });
  ({ producer } = rig);
});

afterAll(async () => {
  for (const child of children) child.kill('SIGKILL');
  await rig?.close();
});

/** Starts `work` on a free port and resolves with that port once it logged 'worker started'. */
async function startWork(env: Record<string, string>): Promise<{ port: number; url: string }> {
  const child = spawn(process.execPath, [bin, 'work'], {
    env: {
      PATH: process.env.PATH ?? '',
      ...rig?.workerEnv({ PORT: '0', LOG_LEVEL: 'info', ...env }),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  let output = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`work did not start:\n${output}`)), 30_000);
    child.stderr?.on('data', (d: Buffer) => {
      output += d.toString();
    });
    child.stdout?.on('data', (d: Buffer) => {
      output += d.toString();
      const line = output.split('\n').find((l) => l.includes('"worker started"'));
      if (!line) return;
      clearTimeout(timer);
      const { port } = JSON.parse(line) as { port: number };
      resolve({ port, url: `http://127.0.0.1:${port}` });
    });
    child.once('exit', (code) => reject(new Error(`work exited ${code}:\n${output}`)));
  });
}

async function metricValue(url: string, series: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line ? Number(line.split(' ')[1]) : 0;
}

describe('perks-worker work, operations server', () => {
  let url = '';
  let port = 0;

  it('answers /healthz, /readyz and /metrics, whose counters follow a real job', async () => {
    ({ url, port } = await startWork({ DASHBOARD_PASSWORD: password }));
    expect((await fetch(`${url}/healthz`)).status).toBe(200);
    const ready = await fetch(`${url}/readyz`);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toEqual({
      status: 'ready',
      checks: { redis: 'ok', postgres: 'ok', 'perks api': 'ok' },
    });

    await producer.enqueueEnrollment({ consumerId: 'e2e-ops-1' });
    const completed = 'perks_worker_jobs_completed_total{queue="reward-sync"}';
    const deadline = Date.now() + 20_000;
    while ((await metricValue(url, completed)) < 1 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 200));
    }
    expect(await metricValue(url, completed)).toBe(1);
    expect(await metricValue(url, 'perks_worker_enrollments_total{outcome="created"}')).toBe(1);
    expect(await metricValue(url, 'perks_worker_rewards_written_total{result="inserted"}')).toBe(
      12,
    );
    expect(await metricValue(url, 'perks_worker_tokens_minted_total')).toBe(1);
  });

  it('serves the dashboard behind basic auth when DASHBOARD_PASSWORD is set', async () => {
    expect((await fetch(`${url}/dashboard`)).status).toBe(401);
    const page = await fetch(`${url}/dashboard`, {
      headers: { authorization: `Basic ${Buffer.from(`admin:${password}`).toString('base64')}` },
    });
    expect(page.status).toBe(200);
    expect(await page.text()).toContain('<title>perks-worker</title>');
  });

  it.skipIf(!chromium && !inCi)(
    'renders the dashboard in headless Chromium (skipped outside CI when chromium is not installed)',
    async () => {
      if (!chromium) expect.fail("chromium is not installed: .ci/run installs Debian's chromium");
      const dir = mkdtempSync(join(tmpdir(), 'perks-dashboard-'));
      try {
        const out = join(dir, 'dashboard.png');
        await promisify(execFile)(
          'bash',
          [join(root, 'scripts/dashboard-screenshot.sh'), `${url}/dashboard`, out],
          { env: { ...process.env, DASHBOARD_PASSWORD: password }, timeout: 60_000 },
        );
        const png = readFileSync(out);
        expect(png.subarray(1, 4).toString('latin1')).toBe('PNG');
        // A rendered page, not a blank or loading screen, is far larger than a few KiB.
        expect(png.byteLength).toBeGreaterThan(20_000);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
    90_000,
  );

  it('has no dashboard without DASHBOARD_PASSWORD: /dashboard is 404', async () => {
    const other = await startWork({});
    expect(other.port).not.toBe(port);
    expect((await fetch(`${other.url}/dashboard`)).status).toBe(404);
    expect((await fetch(`${other.url}/metrics`)).status).toBe(200);
  });
});
