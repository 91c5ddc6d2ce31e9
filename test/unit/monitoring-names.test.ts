/**
 * The Grafana dashboard and the alert rules name only series the worker exports: every metric
 * in their PromQL is one src/ops/metrics.ts registers (with the _bucket/_sum/_count series of
 * its histograms), or Prometheus' own `up`. A renamed metric fails here, not on a blank panel or
 * an alert that can never fire. Also the dashboard's shape: what Grafana needs to load it.
 * (promtool parses the same expressions in test/e2e/monitoring.test.ts.)
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { createMetrics } from '../../src/ops/metrics.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const dashboardPath = `${root}ops/grafana/perks-worker.json`;
const alertsPath = `${root}ops/prometheus/alerts.yml`;

/** Series written by Prometheus itself, not by the worker. */
const scrapeSeries = ['up'];

interface Target {
  refId?: string;
  expr?: string;
  datasource?: { type?: string; uid?: string };
}
interface Panel {
  id?: number;
  type?: string;
  title?: string;
  datasource?: { type?: string; uid?: string };
  targets?: Target[];
  gridPos?: { h: number; w: number; x: number; y: number };
}
interface TemplateVariable {
  type: string;
  name: string;
  query?: unknown;
}
interface Dashboard {
  uid?: string;
  title?: string;
  schemaVersion?: number;
  panels: Panel[];
  templating: { list: TemplateVariable[] };
}

const dashboard = JSON.parse(readFileSync(dashboardPath, 'utf8')) as Dashboard;
const queryPanels = dashboard.panels.filter((p) => p.type !== 'row');

/** Every series name the worker's registry exposes, as Prometheus stores them. */
async function exportedSeries(): Promise<Set<string>> {
  const metrics = await createMetrics().registry.getMetricsAsJSON();
  const names = new Set(scrapeSeries);
  for (const { name, type } of metrics) {
    const kind = String(type);
    if (kind === 'histogram') for (const s of ['_bucket', '_sum', '_count']) names.add(name + s);
    else if (kind === 'summary') for (const s of ['', '_sum', '_count']) names.add(name + s);
    else names.add(name);
  }
  return names;
}

const promqlWords = new Set([
  'and',
  'or',
  'unless',
  'by',
  'without',
  'on',
  'ignoring',
  'group_left',
  'group_right',
  'offset',
  'bool',
  'inf',
  'nan',
]);

/**
 * The metric names of one PromQL expression: identifiers left once strings, label matchers,
 * ranges, grouping label lists and Grafana variables are removed, that are neither a function
 * call nor a keyword.
 */
function metricNames(expr: string): string[] {
  const bare = expr
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""')
    .replace(/\{[^}]*\}/g, '')
    .replace(/\[[^\]]*\]/g, '')
    .replace(/\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, '')
    .replace(/\$\{[^}]*\}|\$\w+/g, '');
  const names = [...bare.matchAll(/(?<![\w.:$])[a-zA-Z_:][\w:]*(?![\w:]|\s*\()/g)].map((m) => m[0]);
  return names.filter((name) => !promqlWords.has(name.toLowerCase()));
}

/** A variable's query: `label_values(metric{...}, label)` names its metric first; others are PromQL. */
function variableMetricNames(query: string): string[] {
  const labelValues = /^\s*label_values\(\s*([^,)]*)/.exec(query);
  if (labelValues) return metricNames(labelValues[1] ?? '');
  return metricNames(query.replace(/^\s*query_result\((.*)\)\s*$/, '$1'));
}

/**
 * The `expr` of each rule in a Prometheus rule file: plain scalars and `>`/`|` block scalars,
 * the two forms the file uses. The count is checked against the rules, so an unread form fails.
 */
function ruleExpressions(yaml: string): string[] {
  const lines = yaml.split('\n');
  const exprs: string[] = [];
  lines.forEach((line, i) => {
    const match = /^(\s*)expr:\s*(.*)$/.exec(line);
    if (!match) return;
    const indent = match[1]?.length ?? 0;
    const value = (match[2] ?? '').trim();
    if (!/^[>|][+-]?$/.test(value)) {
      exprs.push(value.replace(/^(['"])(.*)\1$/, '$2'));
      return;
    }
    const block: string[] = [];
    for (const next of lines.slice(i + 1)) {
      if (next.trim() !== '' && next.search(/\S/) <= indent) break;
      block.push(next.trim());
    }
    exprs.push(block.join(' ').trim());
  });
  return exprs;
}

function dashboardExpressions(): { where: string; names: string[] }[] {
  const fromPanels = queryPanels.flatMap((panel) =>
    (panel.targets ?? []).map((t) => ({
      where: `panel "${panel.title}" ${t.refId}`,
      names: metricNames(t.expr ?? ''),
    })),
  );
  const fromVariables = dashboard.templating.list
    .filter((v) => v.type === 'query')
    .map((v) => ({ where: `variable ${v.name}`, names: variableMetricNames(String(v.query)) }));
  return [...fromPanels, ...fromVariables];
}

function alertExpressions(): { where: string; names: string[] }[] {
  return ruleExpressions(readFileSync(alertsPath, 'utf8')).map((expr, i) => ({
    where: `rule ${i + 1}`,
    names: metricNames(expr),
  }));
}

function unknown(uses: { where: string; names: string[] }[], known: Set<string>): string[] {
  return uses.flatMap(({ where, names }) =>
    names.filter((n) => !known.has(n)).map((n) => `${where}: ${n}`),
  );
}

describe('metric names in PromQL', () => {
  it('reads the names of an expression, and only those', () => {
    expect(
      metricNames(
        'sum by (queue) (rate(perks_worker_jobs_failed_total{reason="error", job=~"$job"}[$__rate_interval]))' +
          ' / clamp_min(sum(rate(perks_worker_jobs_completed_total[15m] offset 5m)) by (queue), 1e-9) > 0.05' +
          ' unless on (queue) up == 0',
      ),
    ).toEqual(['perks_worker_jobs_failed_total', 'perks_worker_jobs_completed_total', 'up']);
    expect(
      variableMetricNames('label_values(perks_worker_queue_jobs{job=~"$job"}, instance)'),
    ).toEqual(['perks_worker_queue_jobs']);
  });

  it('reports a misspelled metric as unknown', async () => {
    const known = await exportedSeries();
    const uses = [
      { where: 'typo', names: metricNames('sum(rate(perks_worker_job_completed_total[5m]))') },
      {
        where: 'histogram',
        names: metricNames('perks_worker_api_request_duration_seconds_bucket'),
      },
      { where: 'counter', names: metricNames('perks_worker_tokens_minted') },
    ];
    expect(unknown(uses, known)).toEqual([
      'typo: perks_worker_job_completed_total',
      'counter: perks_worker_tokens_minted',
    ]);
  });

  it('reads every rule of the alert file', () => {
    const yaml = readFileSync(alertsPath, 'utf8');
    const rules = yaml.match(/^\s*- (?:alert|record):/gm) ?? [];
    const exprs = ruleExpressions(yaml);
    expect(exprs).toHaveLength(rules.length);
    expect(exprs.every((e) => e.length > 0 && !/^[>|]/.test(e))).toBe(true);
  });

  it('alert rules name only metrics the worker exports', async () => {
    const uses = alertExpressions();
    expect(uses.flatMap((u) => u.names)).toContain(
      'perks_worker_webhook_oldest_undelivered_seconds',
    );
    expect(unknown(uses, await exportedSeries())).toEqual([]);
  });

  it('dashboard queries name only metrics the worker exports', async () => {
    const uses = dashboardExpressions();
    expect(unknown(uses, await exportedSeries())).toEqual([]);
  });

  it('the dashboard covers throughput, errors, API latency, mints, depth, reconciliation and webhooks', () => {
    const used = new Set(dashboardExpressions().flatMap((u) => u.names));
    for (const name of [
      'perks_worker_jobs_completed_total',
      'perks_worker_jobs_failed_total',
      'perks_worker_api_request_duration_seconds_bucket',
      'perks_worker_api_throttled_total',
      'perks_worker_tokens_minted_total',
      'perks_worker_queue_jobs',
      'perks_worker_reconciliation_enqueued_consumers',
      'perks_worker_webhook_oldest_undelivered_seconds',
      'perks_worker_webhook_deliveries_total',
    ]) {
      expect(used, name).toContain(name);
    }
  });
});

describe('Grafana dashboard JSON', () => {
  it('is a dashboard with a uid, a title and a current schema version', () => {
    expect(dashboard.uid).toBe('perks-worker');
    expect(dashboard.title).toBeTruthy();
    expect(dashboard.schemaVersion).toBeGreaterThanOrEqual(36);
  });

  it('has a Prometheus datasource variable that every query panel and target uses', () => {
    const variable = dashboard.templating.list.find((v) => v.type === 'datasource');
    expect(variable).toMatchObject({ name: 'datasource', query: 'prometheus' });
    // biome-ignore lint/suspicious/noTemplateCurlyInString: Grafana's variable syntax, not JS.
    const ds = { type: 'prometheus', uid: '${datasource}' };
    for (const panel of queryPanels) {
      expect(panel.datasource, panel.title).toEqual(ds);
      for (const target of panel.targets ?? []) expect(target.datasource, panel.title).toEqual(ds);
    }
  });

  it('gives every panel a unique id and a place on the 24-column grid', () => {
    const ids = dashboard.panels.map((p) => p.id);
    expect(ids.every((id) => Number.isInteger(id))).toBe(true);
    expect(new Set(ids).size).toBe(ids.length);
    for (const { gridPos, title } of dashboard.panels) {
      expect(gridPos, title).toBeDefined();
      if (gridPos) expect(gridPos.x + gridPos.w, title).toBeLessThanOrEqual(24);
    }
  });

  it('gives every query panel targets with an expression and distinct refIds', () => {
    expect(queryPanels.length).toBeGreaterThan(0);
    for (const panel of queryPanels) {
      const targets = panel.targets ?? [];
      expect(targets.length, panel.title).toBeGreaterThan(0);
      expect(
        targets.every((t) => (t.expr ?? '').trim() !== ''),
        panel.title,
      ).toBe(true);
      expect(new Set(targets.map((t) => t.refId)).size, panel.title).toBe(targets.length);
    }
  });
});
