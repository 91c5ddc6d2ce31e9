/**
 * OpenTelemetry traces of the jobs, exported over OTLP/HTTP to OTEL_EXPORTER_OTLP_ENDPOINT:
 * a span per job attempt (bullmq-otel), and inside it a span per Perks API call (undici) and
 * per PostgreSQL query (pg). A job continues the trace of whoever enqueued it: a producer
 * whose queues have this telemetry, or an intake request carrying a W3C `traceparent`.
 *
 * Everything is imported on demand: without an endpoint, `work` loads no OpenTelemetry code.
 * No span carries a token or secret: request headers and SQL parameter values are not recorded
 * (URLs and SQL text are), and neither ever enters job data or error messages.
 */
import { createRequire } from 'node:module';
import type { Telemetry } from 'bullmq';
import type { Logger } from './logger.js';

export interface TracingOptions {
  /** OTLP/HTTP base URL, e.g. http://127.0.0.1:4318; spans go to `<endpoint>/v1/traces`. */
  endpoint: string;
  /** The `service.name` resource attribute (OTEL_SERVICE_NAME). Default 'perks-worker'. */
  serviceName?: string;
  logger?: Logger;
}

/** Request or message headers, as node:http and AMQP clients give them. */
export type CarrierHeaders = Readonly<Record<string, unknown>>;

/**
 * Runs `fn` in the trace that the W3C `traceparent` (and `tracestate`) of `headers` name; a
 * job enqueued inside continues that trace. Without a valid `traceparent`, in a new trace.
 */
export type ContinueTrace = <T>(headers: CarrierHeaders, fn: () => T) => T;

export interface Tracing {
  /** Pass to BullMQ Workers and Queues as their `telemetry` option. */
  telemetry: Telemetry;
  continueTrace: ContinueTrace;
  /** Sends the spans still buffered, then stops. Call once, at shutdown. */
  shutdown(): Promise<void>;
}

export async function startTracing(options: TracingOptions): Promise<Tracing> {
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
  // Global registration: bullmq-otel and the instrumentations ask the global API for their
  // tracer, the context manager (AsyncLocalStorage) and the W3C propagator.
  provider.register();
  const uninstrument = await instrumentClients();
  options.logger?.info({ endpoint: options.endpoint, serviceName }, 'tracing to OTLP endpoint');
  return {
    telemetry: new BullMQOtel({ tracerName: serviceName }),
    continueTrace: (headers, fn) =>
      api.context.with(api.propagation.extract(api.context.active(), headers), fn),
    async shutdown() {
      uninstrument();
      try {
        await provider.shutdown();
      } catch (error) {
        options.logger?.warn(
          { err: { message: error instanceof Error ? error.message : String(error) } },
          'could not flush the last trace spans',
        );
      }
    },
  };
}

/**
 * Spans for undici requests and pg queries, only inside another span (a job's): the outbox
 * polls and webhook deliveries outside jobs would otherwise each start a trace of their own.
 * undici publishes on diagnostics_channel, which works whenever it was loaded. pg is CommonJS
 * and already loaded by our ESM imports (the migration runs before tracing starts), and the
 * require hook patches a module when it is required: so require pg and pg-pool once more,
 * which patches their Client and Pool prototypes in place, for every importer.
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
      // Query text only: our queries are parameterised, and their values stay out of spans.
      new PgInstrumentation({ requireParentSpan: true, enhancedDatabaseReporting: false }),
    ],
  });
  const require = createRequire(import.meta.url);
  require('pg');
  createRequire(require.resolve('pg'))('pg-pool');
  return unregister;
}
