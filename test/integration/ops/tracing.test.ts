/**
 * Traces through bullmq-otel: with an OTLP endpoint, the worker's job attempts arrive as
 * spans at <endpoint>/v1/traces (here a local HTTP server standing in for a collector),
 * named after their queues and carrying no credential.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTracing, type Tracing } from '../../../src/ops/tracing.js';
import { enqueueEnrollment } from '../../../src/queues/producer.js';
import { type Rig, rigConsumerIdKey, startRig } from './rig.js';

const received: { path: string; contentType: string; body: string }[] = [];
let collector: Server;
let tracing: Tracing;
let rig: Rig;

beforeAll(async () => {
  collector = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      received.push({
        path: req.url ?? '',
        contentType: req.headers['content-type'] ?? '',
        body: Buffer.concat(chunks).toString('utf8'),
      });
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{}');
    });
  });
  await new Promise<void>((resolve) => collector.listen(0, '127.0.0.1', () => resolve()));
  const { port } = collector.address() as AddressInfo;
  tracing = await startTracing({ endpoint: `http://127.0.0.1:${port}` });
  rig = await startRig({ telemetry: tracing.telemetry });
});

afterAll(async () => {
  await rig?.close();
  await tracing?.shutdown();
  await new Promise<void>((resolve) => collector?.close(() => resolve()));
});

describe('tracing', () => {
  it('exports a span per job attempt to the OTLP endpoint, with the service name and no secret', async () => {
    rig.sandbox.state.addConsumer('trace-me', { enrolled: false, rewards: 3 });
    await enqueueEnrollment(rig.runtime.ctx.queues, { consumerId: 'trace-me' }, rigConsumerIdKey);
    await rig.idle();
    await tracing.shutdown(); // flushes the batch

    expect(received.length).toBeGreaterThan(0);
    const all = received.map((r) => r.body).join('\n');
    expect(received.every((r) => r.path === '/v1/traces')).toBe(true);
    expect(all).toContain('perks-worker'); // service.name
    expect(all).toContain('enrollment');
    expect(all).toContain('reward-sync');
    expect(all).not.toContain(rig.config.perks.clientSecret);
    expect(all).not.toMatch(/eyJ[\w-]{10,}\.eyJ[\w-]{10,}\./);
  });
});
