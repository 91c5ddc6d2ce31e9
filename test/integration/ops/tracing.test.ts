/**
 * Traces, as a collector receives them at <endpoint>/v1/traces (here a local HTTP server
 * decoding the exporter's OTLP JSON): a span per job attempt, continuing the trace of the
 * producer or intake request that enqueued it, with the job's Perks API calls (undici) and
 * PostgreSQL queries (pg) inside it, under OTEL_SERVICE_NAME, and no credential anywhere.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { trace } from '@opentelemetry/api';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Tracing } from '../../../src/ops/tracing.js';
import { basicCredentials } from '../../../src/perks/http.js';
import { createProducer } from '../../../src/queues/producer.js';
import { type Rig, startRig } from './rig.js';

interface ExportedSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  scope: string;
  service: string;
  attributes: Record<string, unknown>;
}

const serviceName = 'perks-worker-under-test';
const intakeToken = 'tracing-intake-token-0123456789abcdef';
/** A trace started by a caller of the HTTP intake, as its W3C header names it. */
const callerTraceId = '4bf92f3577b34da6a3ce929d0e0e4736';
const callerSpanId = '00f067aa0ba902b7';

const bodies: string[] = [];
let spans: ExportedSpan[] = [];
let collector: Server;
let tracing: Tracing;
let rig: Rig;
let signupSpan: { traceId: string; spanId: string };

beforeAll(async () => {
  collector = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      expect(req.url).toBe('/v1/traces');
      expect(req.headers['content-type']).toBe('application/json');
      bodies.push(Buffer.concat(chunks).toString('utf8'));
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{}');
    });
  });
  await new Promise<void>((resolve) => collector.listen(0, '127.0.0.1', () => resolve()));
  const { port } = collector.address() as AddressInfo;
  rig = await startRig({
    env: {
      OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}`,
      OTEL_SERVICE_NAME: serviceName,
      INTAKE_TOKEN: intakeToken,
      INTAKE_PORT: '0',
      INTAKE_HOST: '127.0.0.1',
    },
  });
  if (!rig.app.tracing) throw new Error('OTEL_EXPORTER_OTLP_ENDPOINT did not turn tracing on');
  tracing = rig.app.tracing;
  rig.sandbox.state.addConsumer('traced-signup', { enrolled: false, rewards: 2 });

  // A client's service: its own span around the enqueue, through the traced producer API.
  const producer = await createProducer({
    redisUrl: rig.config.redis.url,
    queuePrefix: rig.prefix,
    telemetry: tracing.telemetry,
  });
  await trace.getTracer('signup-service').startActiveSpan('signup', async (span) => {
    await producer.enqueueEnrollment({ consumerId: 'traced-signup' });
    signupSpan = span.spanContext();
    span.end();
  });
  await producer.close();
  await rig.idle();

  // A caller of the HTTP intake, in a trace of its own.
  const response = await fetch(`http://127.0.0.1:${rig.app.intake.summary.http}/v1/enrollments`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${intakeToken}`,
      'content-type': 'application/json',
      traceparent: `00-${callerTraceId}-${callerSpanId}-01`,
    },
    body: JSON.stringify({ user_id: 'customer-traced-over-http' }),
  });
  expect(response.status).toBe(202);
  await rig.idle();
  await tracing.shutdown(); // flushes the batch
  spans = bodies.flatMap(decodeSpans);
}, 60_000);

afterAll(async () => {
  await rig?.close();
  await tracing?.shutdown();
  await new Promise<void>((resolve) => collector?.close(() => resolve()));
});

/** OTLP/JSON as @opentelemetry/exporter-trace-otlp-http sends it (ids in hex). */
function decodeSpans(body: string): ExportedSpan[] {
  interface KeyValue {
    key: string;
    value: Record<string, unknown>;
  }
  const attributesOf = (list: KeyValue[] = []) =>
    Object.fromEntries(list.map(({ key, value }) => [key, Object.values(value)[0]]));
  const { resourceSpans } = JSON.parse(body) as {
    resourceSpans: {
      resource: { attributes: KeyValue[] };
      scopeSpans: {
        scope: { name: string };
        spans: (Omit<ExportedSpan, 'scope' | 'service' | 'attributes'> & {
          attributes?: KeyValue[];
        })[];
      }[];
    }[];
  };
  return resourceSpans.flatMap(({ resource, scopeSpans }) =>
    scopeSpans.flatMap(({ scope, spans }) =>
      spans.map((span) => ({
        traceId: span.traceId,
        spanId: span.spanId,
        ...(span.parentSpanId ? { parentSpanId: span.parentSpanId } : {}),
        name: span.name,
        scope: scope.name,
        service: String(attributesOf(resource.attributes)['service.name']),
        attributes: attributesOf(span.attributes),
      })),
    ),
  );
}

/** The span of the one enrollment job attempt of a trace (bullmq-otel: `process <queue>`). */
function enrollmentJobSpan(traceId: string): ExportedSpan {
  const found = spans.filter((s) => s.traceId === traceId && s.name === 'process enrollment');
  expect(found, `job spans of trace ${traceId}`).toHaveLength(1);
  return found[0] as ExportedSpan;
}

const childrenOf = (parent: ExportedSpan, scope: string) =>
  spans.filter((s) => s.parentSpanId === parent.spanId && s.scope.endsWith(scope));

describe('tracing', () => {
  it('exports every span under OTEL_SERVICE_NAME', () => {
    expect(spans.length).toBeGreaterThan(0);
    expect(new Set(spans.map((s) => s.service))).toEqual(new Set([serviceName]));
  });

  it("continues a producer's trace into the job's span", () => {
    const job = enrollmentJobSpan(signupSpan.traceId);
    const add = spans.find((s) => s.spanId === job.parentSpanId);
    // Every enrollment is enqueued with addBulk, a single one as a batch of one.
    expect(add?.name).toBe('addBulk enrollment');
    expect(add?.parentSpanId).toBe(signupSpan.spanId);
  });

  it('carries the trace on to the sync the enrollment enqueues', () => {
    const enrollment = enrollmentJobSpan(signupSpan.traceId);
    const add = spans.find(
      (s) => s.traceId === signupSpan.traceId && s.name.startsWith('add reward-sync'),
    );
    expect(add?.parentSpanId).toBe(enrollment.spanId);
    const sync = spans.filter(
      (s) => s.traceId === signupSpan.traceId && s.name === 'process reward-sync',
    );
    expect(sync).toHaveLength(1);
    expect(sync[0]?.parentSpanId).toBe(add?.spanId);
    const listed = childrenOf(sync[0] as ExportedSpan, 'instrumentation-undici').map(
      (s) => `${s.attributes['http.request.method']} ${s.attributes['url.path']}`,
    );
    expect(listed).toContain('GET /perks/consumers/traced-signup/rewards');
  });

  it("makes the job's API calls and queries children of its span", () => {
    const job = enrollmentJobSpan(signupSpan.traceId);
    const calls = childrenOf(job, 'instrumentation-undici').map(
      (s) => `${s.attributes['http.request.method']} ${s.attributes['url.path']}`,
    );
    expect(calls).not.toContain('POST /tokens'); // minted at start, by the mint probe
    expect(calls).toContain('POST /perks/consumers');
    const queries = childrenOf(job, 'instrumentation-pg');
    expect(queries.length).toBeGreaterThan(0);
    expect(queries.some((s) => String(s.attributes['db.query.text'] ?? '').length > 0)).toBe(true);
  });

  it("continues an intake request's traceparent into the job's span", () => {
    const job = enrollmentJobSpan(callerTraceId);
    const add = spans.find((s) => s.spanId === job.parentSpanId);
    expect(add?.parentSpanId).toBe(callerSpanId);
    expect(childrenOf(job, 'instrumentation-undici').length).toBeGreaterThan(0);
  });

  it('records no query parameter, credential or token', () => {
    const all = bodies.join('\n');
    expect(all).toContain('POST'); // the payloads were read
    expect(all).not.toContain(rig.config.perks.clientSecret);
    expect(all).not.toContain(
      basicCredentials(rig.config.perks.clientId, rig.config.perks.clientSecret),
    );
    expect(all).not.toContain(intakeToken);
    expect(all).not.toMatch(/eyJ[\w-]{10,}\.eyJ[\w-]{10,}\./); // a bearer JWT
    // What enhancedDatabaseReporting would add: the values of a query's parameters.
    expect(all).not.toContain('db.postgresql.values');
    expect(all).not.toContain('db.query.parameter');
  });
});
