/**
 * OpenTelemetry traces of the jobs, through bullmq-otel: a span per job attempt (queue, job
 * id, attempts), exported over OTLP/HTTP to OTEL_EXPORTER_OTLP_ENDPOINT.
 *
 * Everything is imported on demand: without an endpoint, `work` loads no OpenTelemetry code.
 * Spans carry what BullMQ puts in them (names, ids, attempts, failure messages), never a
 * token or secret: those never enter job data or error messages.
 */
import type { Telemetry } from 'bullmq';
import type { Logger } from './logger.js';

export interface TracingOptions {
  /** OTLP/HTTP base URL, e.g. http://127.0.0.1:4318; spans go to `<endpoint>/v1/traces`. */
  endpoint: string;
  /** The `service.name` resource attribute. Default 'perks-worker'. */
  serviceName?: string;
  logger?: Logger;
}

export interface Tracing {
  /** Pass to BullMQ Workers (and Queues) as their `telemetry` option. */
  telemetry: Telemetry;
  /** Sends the spans still buffered, then stops. Call once, at shutdown. */
  shutdown(): Promise<void>;
}

export async function startTracing(options: TracingOptions): Promise<Tracing> {
  const [{ BullMQOtel }, sdk, { OTLPTraceExporter }, { resourceFromAttributes }] =
    await Promise.all([
      import('bullmq-otel'),
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
  // Global registration: bullmq-otel asks the global API for its tracer and context manager.
  provider.register();
  options.logger?.info({ endpoint: options.endpoint, serviceName }, 'tracing to OTLP endpoint');
  return {
    telemetry: new BullMQOtel({ tracerName: serviceName }),
    async shutdown() {
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
