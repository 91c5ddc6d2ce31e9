/**
 * A TCP proxy for fault-injection tests: put it between the worker and Redis or PostgreSQL,
 * then cut every open connection, refuse new ones for a while, or hold traffic, and resume.
 * The machine's shared services are never touched: only the path to them breaks.
 *
 * - `cut()`: destroys every open connection (both sides); new ones are accepted. A server
 *   restart, seen from the client, as a dropped connection and a quick reconnect.
 * - `pause()`: cuts, then destroys each new connection as soon as it arrives, until
 *   `resume()`. The service is down.
 * - `blackhole()`: cuts, then accepts new connections but forwards nothing, until
 *   `resume()`. A network partition: requests hang rather than fail.
 * - `freeze()`: forwards nothing on the open connections, and closes none. A host that lost
 *   power, as its peers see it: no FIN, no RST.
 */
import { createServer, type Server, Socket } from 'node:net';

export type ProxyMode = 'forward' | 'refuse' | 'blackhole';

export interface TcpProxy {
  /** Port the proxy listens on (127.0.0.1). */
  readonly port: number;
  /** `url` with its host and port replaced by the proxy's. */
  urlFor(url: string): string;
  readonly mode: ProxyMode;
  /** Connections accepted so far, and those currently open. */
  stats(): { accepted: number; open: number; cuts: number };
  cut(): void;
  pause(): void;
  blackhole(): void;
  freeze(): void;
  resume(): void;
  close(): Promise<void>;
}

export async function startTcpProxy(target: { host: string; port: number }): Promise<TcpProxy> {
  const pairs = new Set<{ client: Socket; upstream?: Socket }>();
  let mode: ProxyMode = 'forward';
  let accepted = 0;
  let cuts = 0;

  const destroyAll = () => {
    for (const pair of pairs) {
      pair.client.destroy();
      pair.upstream?.destroy();
    }
    pairs.clear();
  };

  const server: Server = createServer((client) => {
    accepted++;
    client.on('error', () => {});
    if (mode === 'refuse') {
      client.destroy();
      return;
    }
    const pair: { client: Socket; upstream?: Socket } = { client };
    pairs.add(pair);
    client.on('close', () => {
      pair.upstream?.destroy();
      pairs.delete(pair);
    });
    if (mode === 'blackhole') {
      // Read and drop: the client's writes succeed, no answer ever comes.
      client.resume();
      return;
    }
    const upstream = new Socket();
    pair.upstream = upstream;
    upstream.on('error', () => client.destroy());
    upstream.on('close', () => client.destroy());
    upstream.connect(target.port, target.host, () => {
      client.pipe(upstream);
      upstream.pipe(client);
    });
  });
  server.on('error', () => {});
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('proxy has no port');
  const port = address.port;

  return {
    port,
    get mode() {
      return mode;
    },
    urlFor(url) {
      const parsed = new URL(url);
      parsed.hostname = '127.0.0.1';
      parsed.port = String(port);
      return parsed.toString();
    },
    stats: () => ({ accepted, open: pairs.size, cuts }),
    cut() {
      cuts++;
      destroyAll();
    },
    pause() {
      mode = 'refuse';
      cuts++;
      destroyAll();
    },
    blackhole() {
      mode = 'blackhole';
      cuts++;
      destroyAll();
    },
    freeze() {
      for (const { client, upstream } of pairs) {
        client.unpipe();
        upstream?.unpipe();
        client.pause();
        upstream?.pause();
      }
    },
    resume() {
      // Blackholed connections never carried anything: drop them so clients reconnect.
      if (mode === 'blackhole') destroyAll();
      mode = 'forward';
    },
    async close() {
      destroyAll();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** host and port of a redis:// or postgres:// URL, with the protocol's default port. */
export function targetOf(url: string): { host: string; port: number } {
  const parsed = new URL(url);
  const defaults: Record<string, number> = {
    'redis:': 6379,
    'rediss:': 6379,
    'postgres:': 5432,
    'postgresql:': 5432,
  };
  return {
    host: parsed.hostname || '127.0.0.1',
    port: parsed.port ? Number(parsed.port) : (defaults[parsed.protocol] ?? 0),
  };
}
