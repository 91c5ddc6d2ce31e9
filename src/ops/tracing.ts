/**
 * OpenTelemetry over OTLP/HTTP: a span per job attempt (bullmq-otel), inside it per API call
 * (undici) and SQL query (pg), continuing its producer's or the intake's `traceparent`. Loaded
 * on demand; no span records request headers or SQL parameters.
 */
import { createRequire } from 'node:module';
import type { Telemetry } from 'bullmq';
import { redactUrl } from '../config.js';
import type { Logger } from './logger.js';

interface TracingOptions {
  /** OTLP/HTTP base URL, e.g. http://127.0.0.1:4318; spans go to `<endpoint>/v1/traces`. */
  endpoint: string;
  /** The `service.name` resource attribute (OTEL_SERVICE_NAME). Default 'perks-worker'. */
  serviceName?: string;
  logger?: Logger;
}

/** Runs `fn` in the trace the W3C `traceparent` of `headers` names (or a new one). */
export type ContinueTrace = <T>(headers: Readonly<Record<string, unknown>>, fn: () => T) => T;

export type Tracing = Awaited<ReturnType<typeof startTracing>>;

export async function startTracing(options: TracingOptions) {
  const [{ BullMQOtel }, api, sdk, { OTLPTraceExporter }, { resourceFromAttributes }] =
    await Promise.all([
      import('bullmq-otel'),
      import('@opentelemetry/api'),
      import('@opentelemetry/sdk-trace-node'),
      import('@opentelemetry/exporter-trace-otlp-http'),
      import('@opentelemetry/resources'),
    ]);
  const serviceName = options.serviceName ?? 'perks-worker';
  const exporter = new OTLPTraceExporter({ url: `${options.endpoint}/v1/traces` });
  const provider = new sdk.NodeTracerProvider({
    resource: resourceFromAttributes({ 'service.name': serviceName }),
    spanProcessors: [new sdk.BatchSpanProcessor(exporter)],
  });
  // bullmq-otel and the instrumentations find the tracer, context and propagator globally.
  provider.register();
  const uninstrument = await instrumentClients();
  const endpoint = redactUrl(options.endpoint);
  options.logger?.info({ endpoint, serviceName }, 'tracing to OTLP endpoint');
  const continueTrace: ContinueTrace = (headers, fn) =>
    api.context.with(api.propagation.extract(api.context.active(), headers), fn);
  return {
    /** Pass to BullMQ Workers and Queues as their `telemetry` option. */
    telemetry: new BullMQOtel({ tracerName: serviceName }) as Telemetry,
    continueTrace,
    /** Sends the spans still buffered, then stops. Call once, at shutdown. */
    async shutdown(): Promise<void> {
      uninstrument();
      await provider.shutdown().catch((error: unknown) => {
        const err = { message: error instanceof Error ? error.message : String(error) };
        options.logger?.warn({ err }, 'could not flush the last trace spans');
      });
    },
  };
}

/**
 * Spans for undici and pg only inside a job's (outbox polls would each start a trace). The hook
 * patches a module as required, and pg is loaded: so pg and pg-pool are required once more.
 */
async function instrumentClients(): Promise<() => void> {
  const [{ registerInstrumentations }, { UndiciInstrumentation }, { PgInstrumentation }] =
    await Promise.all([
      import('@opentelemetry/instrumentation'),
      import('@opentelemetry/instrumentation-undici'),
      import('@opentelemetry/instrumentation-pg'),
    ]);
  const unregister = registerInstrumentations({
    instrumentations: [
      new UndiciInstrumentation({ requireParentforSpans: true }),
      new PgInstrumentation({ requireParentSpan: true, enhancedDatabaseReporting: false }),
    ],
  });
  const require = createRequire(import.meta.url);
  require('pg');
  createRequire(require.resolve('pg'))('pg-pool');
  return unregister;
}
