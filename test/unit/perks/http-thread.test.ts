import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { errors, Pool, request } from 'undici';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { isRetryable, ResponseTooLargeError, TransportError } from '../../../src/perks/errors.js';
import { exchange } from '../../../src/perks/http.js';
import { ThreadedPool } from '../../../src/perks/http-thread.js';

type Route = (req: IncomingMessage, body: string, res: ServerResponse) => void;

describe('ThreadedPool', () => {
  let server: Server;
  let origin: string;
  let route: Route;
  let pool: ThreadedPool;

  beforeEach(async () => {
    route = (_req, _body, res) => res.end('ok');
    server = createServer((req, res) => {
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (chunk: string) => {
        body += chunk;
      });
      req.on('end', () => route(req, body, res));
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    pool = new ThreadedPool(origin, { connections: 2, maxResponseBytes: 1000 });
  });

  afterEach(async () => {
    await pool.destroy();
    server.closeAllConnections();
    server.close();
  });

  it('answers request() as a Pool does: status, headers (repeated ones too), body', async () => {
    route = (req, body, res) => {
      res.setHeader('content-type', 'application/json');
      res.setHeader('set-cookie', ['a=1', 'b=2']);
      res.end(
        JSON.stringify({
          method: req.method,
          url: req.url,
          token: req.headers.authorization,
          body,
        }),
      );
    };
    const response = await request(`${origin}/perks/consumers?page=2`, {
      dispatcher: pool,
      method: 'POST',
      headers: { authorization: 'Bearer t0k', 'content-type': 'application/json' },
      body: '{"id":"c1"}',
    });
    expect(response.statusCode).toBe(200);
    expect(response.headers['content-type']).toBe('application/json');
    expect(response.headers['set-cookie']).toEqual(['a=1', 'b=2']);
    expect(await response.body.json()).toEqual({
      method: 'POST',
      url: '/perks/consumers?page=2',
      token: 'Bearer t0k',
      body: '{"id":"c1"}',
    });
  });

  it('passes a gateway error body through as sent (not JSON, any status)', async () => {
    route = (_req, _body, res) => {
      res.writeHead(502, { 'content-type': 'text/html' });
      res.end('<html><body>502 Bad Gateway</body></html>');
    };
    const response = await request(`${origin}/x`, { dispatcher: pool });
    expect(response.statusCode).toBe(502);
    expect(await response.body.text()).toBe('<html><body>502 Bad Gateway</body></html>');
  });

  it("fails with the thread's error code: headers timeout, refused connection", async () => {
    route = () => undefined; // never answers
    await expect(
      request(`${origin}/slow`, { dispatcher: pool, headersTimeout: 100 }),
    ).rejects.toMatchObject({ code: 'UND_ERR_HEADERS_TIMEOUT' });

    const closed = new ThreadedPool('http://127.0.0.1:1', { connections: 1, maxResponseBytes: 10 });
    try {
      await expect(request('http://127.0.0.1:1/', { dispatcher: closed })).rejects.toMatchObject({
        code: 'ECONNREFUSED',
      });
    } finally {
      await closed.close();
    }
  });

  it('answers an abort at once with its reason, and frees the connection', async () => {
    route = (req, _body, res) => {
      if (req.url !== '/hang') res.end('next');
    };
    const single = new ThreadedPool(origin, { connections: 1, maxResponseBytes: 1000 });
    try {
      const controller = new AbortController();
      const hung = request(`${origin}/hang`, { dispatcher: single, signal: controller.signal });
      await new Promise((resolve) => setTimeout(resolve, 50));
      const reason = new Error('job cancelled');
      controller.abort(reason);
      await expect(hung).rejects.toBe(reason);
      // One connection: the next request is answered only if the aborted one let it go.
      const next = await request(`${origin}/a`, { dispatcher: single, headersTimeout: 2000 });
      expect(await next.body.text()).toBe('next');
    } finally {
      await single.destroy();
    }
  });

  it('sends nothing for a signal aborted before the call, and refuses handlers it cannot answer', async () => {
    const seen: string[] = [];
    route = (req, _body, res) => {
      seen.push(req.url ?? '');
      res.end('ok');
    };
    const reason = new Error('already cancelled');
    await expect(
      request(`${origin}/never`, { dispatcher: pool, signal: AbortSignal.abort(reason) }),
    ).rejects.toBe(reason);
    expect(() => pool.dispatch({ path: '/', method: 'GET' }, { onResponseStart() {} })).toThrow(
      errors.InvalidArgumentError,
    );
    const headers = new Headers({ authorization: 'Bearer h' });
    route = (req, _body, res) => res.end(req.headers.authorization);
    const answered = await request(`${origin}/h`, { dispatcher: pool, headers });
    expect(await answered.body.text()).toBe('Bearer h');
    expect(seen).toEqual([]);
  });

  it('fails every request in flight on destroy()', async () => {
    route = () => undefined; // never answers
    const inFlight = [1, 2, 3].map((n) =>
      request(`${origin}/${n}`, { dispatcher: pool }).catch((e: unknown) => e),
    );
    await new Promise((resolve) => setTimeout(resolve, 50));
    await pool.destroy();
    for (const outcome of await Promise.all(inFlight)) {
      expect(outcome).toBeInstanceOf(errors.ClientDestroyedError);
    }
  });

  it("refuses a body over the pool's maxResponseBytes, whatever the reader's limit", async () => {
    route = (req, _body, res) => {
      if (req.url === '/declared') res.setHeader('content-length', '1600');
      res.write('x'.repeat(800));
      setTimeout(() => res.end('y'.repeat(800)), 20);
    };
    for (const path of ['/big', '/declared']) {
      const failure = exchange(
        { dispatcher: pool, timeoutMs: 2000, maxResponseBytes: 100_000, secrets: [] },
        { operation: 'listRewards', method: 'GET', url: `${origin}${path}`, headers: {} },
      );
      await expect(failure).rejects.toBeInstanceOf(ResponseTooLargeError);
    }
  });

  it('refuses a declared length over maxResponseBytes without an uncaught error, on a Pool as here', async () => {
    route = (_req, _body, res) => {
      res.writeHead(200, { 'content-length': '2000' });
      res.end('x'.repeat(2000));
    };
    const plain = new Pool(origin, { connections: 1 });
    try {
      for (const dispatcher of [pool, plain]) {
        const failure = exchange(
          { dispatcher, timeoutMs: 2000, maxResponseBytes: 1000, secrets: [] },
          { operation: 'listRewards', method: 'GET', url: `${origin}/declared`, headers: {} },
        );
        await expect(failure).rejects.toBeInstanceOf(ResponseTooLargeError);
      }
      // The body was destroyed unread once it had all arrived: its abort error must not be
      // thrown later as an uncaught exception (vitest would report it and fail the run).
      await new Promise((resolve) => setTimeout(resolve, 50));
    } finally {
      await plain.close();
    }
  });

  it('close() lets the requests in flight finish, then refuses new ones', async () => {
    route = (_req, _body, res) => setTimeout(() => res.end('late'), 100);
    const inFlight = request(`${origin}/late`, { dispatcher: pool }).then((r) => r.body.text());
    await new Promise((resolve) => setTimeout(resolve, 20));
    await pool.close();
    expect(await inFlight).toBe('late');
    expect(ThreadedPool.threadOf(pool)).toBeUndefined();
    await expect(request(`${origin}/`, { dispatcher: pool })).rejects.toBeInstanceOf(
      errors.ClientClosedError,
    );
  });

  it('fails the requests of a thread that dies (retryable), and starts a new one', async () => {
    route = (req, _body, res) => {
      if (req.url !== '/hang') res.end('again');
    };
    const hung = exchange(
      { dispatcher: pool, timeoutMs: 5000, maxResponseBytes: 1000, secrets: [] },
      { operation: 'listRewards', method: 'GET', url: `${origin}/hang`, headers: {} },
    );
    await new Promise((resolve) => setTimeout(resolve, 50));
    const thread = ThreadedPool.threadOf(pool);
    expect(thread).toBeDefined();
    await thread?.terminate();
    const error = await hung.catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TransportError);
    expect((error as TransportError).transportCode).toBe('ERR_HTTP_THREAD_EXIT');
    expect(isRetryable(error)).toBe(true);
    const again = await request(`${origin}/`, { dispatcher: pool });
    expect(await again.body.text()).toBe('again');
    expect(ThreadedPool.threadOf(pool)).not.toBe(thread);
  });
});
