/** The operations server of `work`: /healthz (event loop responsive), /readyz, /metrics. */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import type { Registry } from 'prom-client';
import { OperationalError } from '../errors.js';
import type { Logger } from './logger.js';
import { oncePerOutage } from './outage.js';
import { withTimeout } from './timeouts.js';

export interface ReadinessCheck {
  name: string;
  /** Resolves when ready. A NotReadyError's message is shown; any other error's is only logged. */
  check(): Promise<void>;
}

/** A readiness failure whose message is safe to answer with (no hosts, users or paths). */
export class NotReadyError extends Error {
  override readonly name = 'NotReadyError';
}

export interface OpsServerOptions {
  port: number;
  host?: string;
  checks: readonly ReadinessCheck[];
  logger: Logger;
  /** Served on GET /metrics in the Prometheus text format. Absent: /metrics is 404. */
  registry?: Registry;
  /** Extra routes (the dashboard), tried before the 404. Return true when handled. */
  routes?: (req: IncomingMessage, res: ServerResponse) => Promise<boolean> | boolean;
  /** A check slower than this counts as failed. Default 2000 ms. */
  checkTimeoutMs?: number;
}

/** An event loop stalled longer than this (p99 over the last interval) is not healthy. */
const maxLoopDelayMs = 2000;

/** The port a server of `work` must listen on is taken: the process exits 1 saying which. */
export class PortInUseError extends OperationalError {
  override readonly name = 'PortInUseError';
  constructor(
    variable: string,
    port: number,
    fix = `give each replica on a host its own ${variable}`,
  ) {
    super(`${variable} ${port} is already in use; ${fix}`);
  }
}

export async function startOpsServer(options: OpsServerOptions): Promise<Server> {
  const loop = monitorEventLoopDelay({ resolution: 20 });
  loop.enable();
  const timeoutMs = options.checkTimeoutMs ?? 2000;

  const server = createServer((req, res) => {
    void handle(req, res).catch((error: unknown) => {
      options.logger.error({ err: { message: String(error) } }, 'ops server error');
      if (!res.headersSent) send(res, 500, { status: 'error' });
    });
  });

  // A failing check's own text may name hosts or users: it goes to the log, once per outage.
  const checkOutages = new Map(
    options.checks.map(({ name }) => [
      name,
      oncePerOutage((error) =>
        options.logger.warn(
          { check: name, err: { message: error.message } },
          'readiness check failed',
        ),
      ),
    ]),
  );

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? '/').split('?')[0];
    if (path === '/healthz') {
      const p99 = loop.percentile(99) / 1e6;
      loop.reset();
      const ok = p99 < maxLoopDelayMs;
      return send(res, ok ? 200 : 503, {
        status: ok ? 'ok' : 'event loop stalled',
        loopDelayP99Ms: Math.round(p99),
      });
    }
    if (path === '/readyz') {
      const results = await Promise.all(
        options.checks.map(async ({ name, check }) => {
          try {
            await withTimeout(check(), timeoutMs);
            checkOutages.get(name)?.recovered();
            return { name, state: 'ok' };
          } catch (error) {
            checkOutages
              .get(name)
              ?.error(error instanceof Error ? error : new Error(String(error)));
            return { name, state: error instanceof NotReadyError ? error.message : 'unreachable' };
          }
        }),
      );
      const failing = results.filter((r) => r.state !== 'ok');
      const body = {
        status:
          failing.length === 0
            ? 'ready'
            : `not ready: ${failing.map((f) => (f.state === 'unreachable' ? `${f.name} unreachable` : `${f.name}: ${f.state}`)).join(', ')}`,
        checks: Object.fromEntries(results.map((r) => [r.name, r.state])),
      };
      return send(res, failing.length === 0 ? 200 : 503, body);
    }
    if (path === '/metrics' && options.registry) {
      const text = await options.registry.metrics();
      res.writeHead(200, { 'content-type': options.registry.contentType });
      res.end(text);
      return;
    }
    if (options.routes && (await options.routes(req, res))) return;
    send(res, 404, { status: 'not found' });
  }

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host ?? '0.0.0.0', () => resolve());
  });
  server.on('close', () => loop.disable());
  return server;
}

function send(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

export async function closeServer(server: Server): Promise<void> {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
}
