/**
 * /readyz follows Postgres and Redis going away and coming back. The shared services are
 * never touched: the store and the Redis connection go through TCP proxies run by this test,
 * which it closes (dropping every connection) and reopens on the same port.
 */
import { connect, createServer, type Server, type Socket } from 'node:net';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeServer, startOpsServer } from '../../../src/ops/health.js';
import { createStore, type Store } from '../../../src/store/store.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';
import { testQueuePrefix } from '../../support/redis.js';

/** A TCP proxy that can be cut (listener closed, connections destroyed) and restored. */
class TcpProxy {
  #server: Server | undefined;
  readonly #sockets = new Set<Socket>();
  port = 0;

  constructor(
    private readonly targetHost: string,
    private readonly targetPort: number,
  ) {}

  async open(): Promise<void> {
    const server = createServer((client) => {
      const upstream = connect(this.targetPort, this.targetHost);
      for (const s of [client, upstream]) {
        this.#sockets.add(s);
        s.on('close', () => this.#sockets.delete(s));
        s.on('error', () => {
          client.destroy();
          upstream.destroy();
        });
      }
      client.pipe(upstream).pipe(client);
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.port, '127.0.0.1', () => resolve());
    });
    const address = server.address();
    if (typeof address === 'object' && address) this.port = address.port;
    this.#server = server;
  }

  async cut(): Promise<void> {
    const server = this.#server;
    this.#server = undefined;
    for (const s of this.#sockets) s.destroy();
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}

const logger = pino({ level: 'silent' });
const queues = testQueuePrefix();
let db: TestDatabase;
let pgProxy: TcpProxy;
let redisProxy: TcpProxy;
let store: Store;
let redis: Redis;
let ops: Awaited<ReturnType<typeof startOpsServer>>;
let opsUrl: string;

beforeAll(async () => {
  db = await createTestDatabase();
  const pgUrl = new URL(db.url);
  pgProxy = new TcpProxy(pgUrl.hostname, Number(pgUrl.port || 5432));
  await pgProxy.open();
  pgUrl.host = `127.0.0.1:${pgProxy.port}`;
  store = createStore({ url: pgUrl.toString(), schema: 'perks', poolSize: 2 });

  const redisUrl = new URL(queues.redisUrl);
  redisProxy = new TcpProxy(redisUrl.hostname, Number(redisUrl.port || 6379));
  await redisProxy.open();
  // Like the worker's connection: commands wait for Redis to come back, they do not fail.
  redis = new Redis(redisProxy.port, '127.0.0.1', {
    maxRetriesPerRequest: null,
    retryStrategy: () => 100,
  });
  redis.on('error', () => {});

  ops = await startOpsServer({
    port: 0,
    host: '127.0.0.1',
    logger,
    checkTimeoutMs: 500,
    checks: [
      { name: 'redis', check: async () => void (await redis.ping()) },
      { name: 'postgres', check: () => store.ping() },
    ],
  });
  const address = ops.address();
  opsUrl = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
});

afterAll(async () => {
  await closeServer(ops);
  redis?.disconnect();
  await redisProxy?.cut();
  await store?.close().catch(() => {});
  await pgProxy?.cut();
  await queues.cleanup();
  await db?.drop();
});

async function readyz(): Promise<{ status: number; body: { status: string; checks: object } }> {
  const response = await fetch(`${opsUrl}/readyz`);
  return { status: response.status, body: (await response.json()) as never };
}

/** Polls until /readyz answers `status` (the pool and ioredis reconnect at their own pace). */
async function waitForReadyz(status: number, timeoutMs = 20_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const result = await readyz();
    if (result.status === status || Date.now() > deadline) return result;
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe('/readyz', () => {
  it('answers 503 naming postgres while Postgres is unreachable, and 200 once it is back', async () => {
    expect((await waitForReadyz(200)).status).toBe(200);

    await pgProxy.cut();
    const down = await waitForReadyz(503);
    expect(down.status).toBe(503);
    expect(down.body.status).toBe('not ready: postgres unreachable');
    expect(down.body.checks).toMatchObject({ redis: 'ok' });
    // The driver's own text (hosts, users) is logged, never served.
    expect(down.body.checks).toEqual({ redis: 'ok', postgres: 'unreachable' });
    expect((await fetch(`${opsUrl}/healthz`)).status).toBe(200);

    await pgProxy.open();
    const up = await waitForReadyz(200);
    expect(up.status).toBe(200);
    expect(up.body).toEqual({ status: 'ready', checks: { redis: 'ok', postgres: 'ok' } });
  });

  it('answers 503 naming redis while Redis is unreachable (a ping that would wait forever times out), and 200 once it is back', async () => {
    await redisProxy.cut();
    const down = await waitForReadyz(503);
    expect(down.status).toBe(503);
    expect(down.body.status).toBe('not ready: redis unreachable');
    expect(down.body.checks).toMatchObject({ postgres: 'ok' });
    expect((await fetch(`${opsUrl}/healthz`)).status).toBe(200);

    await redisProxy.open();
    const up = await waitForReadyz(200);
    expect(up.status).toBe(200);
  });

  // Also checked during each outage above.
  it('answers /healthz 200 throughout: the process itself is fine', async () => {
    const response = await fetch(`${opsUrl}/healthz`);
    expect(response.status).toBe(200);
    expect(await response.json()).toMatchObject({ status: 'ok' });
  });
});
