/**
 * The monitoring files checked by Prometheus' own tool: the alert rules load and fire as
 * ops/prometheus/alerts.test.yml says, every dashboard query parses as PromQL, and the live
 * `/metrics` of a real `perks-worker work` process passes `promtool check metrics` (its lint).
 *
 * promtool comes with Debian's `prometheus` package, which .ci/run installs. Without it the
 * file is skipped on a developer's machine, but fails under CI: a check that silently skips
 * in CI checks nothing.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type ProcessRig,
  startProcessRig,
  startWorkerProcess,
  type WorkerProcess,
  waitFor,
} from '../support/processes.js';
import { startWebhookReceiver, type WebhookReceiver } from '../support/webhook-receiver.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const promtoolInstalled = spawnSync('promtool', ['--version']).status === 0;
const inCi = ['true', '1'].includes(process.env.CI ?? '');

function promtool(args: string[], input?: string): { status: number | null; output: string } {
  const run = spawnSync('promtool', args, { cwd: root, input, encoding: 'utf8' });
  return { status: run.status, output: `${run.stdout}${run.stderr}` };
}

it.runIf(inCi && !promtoolInstalled)('has promtool under CI', () => {
  expect.fail("promtool is not installed: .ci/run installs Debian's prometheus package");
});

describe.skipIf(!promtoolInstalled)('monitoring files, checked by promtool', () => {
  it('alert rules pass `promtool check rules`', () => {
    const { status, output } = promtool(['check', 'rules', 'ops/prometheus/alerts.yml']);
    expect(output).toMatch(/SUCCESS: \d+ rules found/);
    expect(status, output).toBe(0);
  });

  it('alert rules fire as ops/prometheus/alerts.test.yml expects (`promtool test rules`)', () => {
    const { status, output } = promtool(['test', 'rules', 'ops/prometheus/alerts.test.yml']);
    expect(status, output).toBe(0);
  });

  it('every dashboard query is valid PromQL once Grafana has filled in its variables', () => {
    const dashboard = JSON.parse(
      readFileSync(join(root, 'ops/grafana/perks-worker.json'), 'utf8'),
    ) as { panels: { id: number; targets?: { refId: string; expr: string }[] }[] };
    const rules = dashboard.panels.flatMap((panel) =>
      (panel.targets ?? []).map((t) => ({
        record: `dashboard:panel_${panel.id}_${t.refId}`,
        expr: t.expr
          .replaceAll('$__rate_interval', '5m')
          .replaceAll('$__interval', '1m')
          .replace(/\$\{?(job|instance)\}?/g, '.*'),
      })),
    );
    expect(rules.length).toBeGreaterThan(0);
    const dir = mkdtempSync(join(tmpdir(), 'perks-dashboard-rules-'));
    try {
      // A JSON document is YAML: a rule file of one recording rule per query.
      const file = join(dir, 'dashboard-rules.yml');
      writeFileSync(file, JSON.stringify({ groups: [{ name: 'dashboard', rules }] }));
      const { status, output } = promtool(['check', 'rules', file]);
      expect(status, output).toBe(0);
      expect(output).toContain(`SUCCESS: ${rules.length} rules found`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  describe('a running worker', () => {
    let rig: ProcessRig | undefined;
    let receiver: WebhookReceiver | undefined;
    let worker: WorkerProcess | undefined;
    let url = '';

    beforeAll(async () => {
      rig = await startProcessRig({ sandbox: { seed: 31, rewardsOnEnroll: 3 } });
      receiver = await startWebhookReceiver();
      // With webhooks on, so that their counters and the lag gauge are in the scrape too.
      worker = startWorkerProcess(
        rig.workerEnv({ WEBHOOK_URL: receiver.url, WEBHOOK_SECRET: receiver.secret }),
      );
      const port = await waitFor('worker started', () => {
        const line = worker
          ?.output()
          .split('\n')
          .find((l) => l.includes('"worker started"'));
        return line ? (JSON.parse(line) as { port: number }).port : undefined;
      });
      url = `http://127.0.0.1:${port}`;
    });

    afterAll(async () => {
      await worker?.stop('SIGKILL');
      await receiver?.close();
      await rig?.close();
    });

    it('serves /metrics that pass `promtool check metrics` after real jobs', async () => {
      if (!rig) throw new Error('no rig');
      await rig.producer.enqueueEnrollment({ consumerId: 'e2e-monitoring-1' });
      // After an enrollment and its sync, the histograms have observations and the
      // webhook counters have moved.
      const text = await waitFor('a completed reward sync and a delivered event', async () => {
        const body = await (await fetch(`${url}/metrics`)).text();
        return /^perks_worker_jobs_completed_total\{queue="reward-sync"\} [1-9]/m.test(body) &&
          /^perks_worker_webhook_deliveries_total\{outcome="delivered"\} [1-9]/m.test(body)
          ? body
          : undefined;
      });
      expect(text).toMatch(/^perks_worker_api_request_duration_seconds_bucket\{/m);
      expect(text).toMatch(/^perks_worker_queue_jobs\{/m);
      expect(text).toMatch(/^perks_worker_webhook_oldest_undelivered_seconds /m);

      const { status, output } = promtool(['check', 'metrics'], text);
      expect(output.trim()).toBe('');
      expect(status, output).toBe(0);
    });
  });
});
