/** The operations server of `work`: /healthz (event loop responsive), /readyz, /metrics. */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import type { Registry } from 'prom-client';
import { OperationalError } from '../errors.js';
import type { Logger } from './logger.js';
import { outageLogger } from './outage.js';
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

/** An extra route (the dashboard): true when it handled the request. */
export type Route = (req: IncomingMessage, res: ServerResponse) => Promise<boolean> | boolean;

export interface OpsServerOptions {
  port: number;
  host?: string;
  checks: readonly ReadinessCheck[];
  logger: Logger;
  /** Served on GET /metrics in the Prometheus text format. Absent: /metrics is 404. */
  registry?: Registry;
  /** Tried before the 404. */
  routes?: Route;
  /** A check slower than this counts as failed. Default 2000 ms. */
  checkTimeoutMs?: number;
  /** Aborted once the process drains: /readyz then answers 503, taking no new traffic. */
  draining?: AbortSignal;
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

/**
 * A server of `work` that cannot listen, as the one line the process exits with: its port taken,
 * or its host (an IP address or localhost, by the config) none of this machine's. Else undefined.
 */
export function listenFailure(
  error: unknown,
  at: { portVariable: string; port: number; hostVariable: string; host: string | undefined },
): OperationalError | undefined {
  const code = (error as NodeJS.ErrnoException).code;
  if (code === 'EADDRINUSE') return new PortInUseError(at.portVariable, at.port);
  if (code === 'EADDRNOTAVAIL' || code === 'ENOTFOUND' || code === 'EAI_AGAIN') {
    return new OperationalError(
      `${at.hostVariable} ${at.host} cannot be listened on (${code}): give an address of this host, such as 0.0.0.0 (every interface) or 127.0.0.1`,
    );
  }
  return undefined;
}

export async function startOpsServer(options: OpsServerOptions): Promise<Server> {
  const { logger, registry, routes, checkTimeoutMs = 2000 } = options;
  const loop = monitorEventLoopDelay({ resolution: 20 });
  loop.enable();
  // A failing check's own text may name hosts or users: it goes to the log, once per outage.
  const checks = options.checks.map(({ name, check }) => {
    const outage = outageLogger(logger, 'readiness check failed', 'warn', { check: name });
    return { name, check, outage };
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? '/').split('?')[0];
    if (path === '/healthz') {
      const p99 = loop.percentile(99) / 1e6;
      loop.reset();
      const ok = p99 < maxLoopDelayMs;
      const status = ok ? 'ok' : 'event loop stalled';
      return send(res, ok ? 200 : 503, { status, loopDelayP99Ms: Math.round(p99) });
    }
    if (path === '/readyz') {
      if (options.draining?.aborted) return send(res, 503, { status: 'not ready: shutting down' });
      const results = await Promise.all(
        checks.map(async ({ name, check, outage }) => {
          try {
            await withTimeout(check(), checkTimeoutMs);
            outage.recovered();
            return { name, state: 'ok' };
          } catch (error) {
            outage.error(error);
            return { name, state: error instanceof NotReadyError ? error.message : 'unreachable' };
          }
        }),
      );
      const failing = results
        .filter((r) => r.state !== 'ok')
        .map((r) =>
          r.state === 'unreachable' ? `${r.name} unreachable` : `${r.name}: ${r.state}`,
        );
      const status = failing.length === 0 ? 'ready' : `not ready: ${failing.join(', ')}`;
      const states = Object.fromEntries(results.map((r) => [r.name, r.state]));
      return send(res, failing.length === 0 ? 200 : 503, { status, checks: states });
    }
    if (path === '/metrics' && registry) {
      const text = await registry.metrics();
      res.writeHead(200, { 'content-type': registry.contentType }).end(text);
      return;
    }
    if (routes && (await routes(req, res))) return;
    send(res, 404, { status: 'not found' });
  }

  const server = createServer((req, res) => {
    void handle(req, res).catch((error: unknown) => {
      logger.error({ err: { message: String(error) } }, 'ops server error');
      if (!res.headersSent) send(res, 500, { status: 'error' });
    });
  });
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
