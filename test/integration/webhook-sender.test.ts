/** One delivery as the receiver sees it: the path as configured, HTTP Basic from the URL. */
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { WebhookSender } from '../../src/events/webhook.js';

let seen: { url?: string; headers: IncomingHttpHeaders }[] = [];
const server = createServer((req, res) => {
  seen.push({ url: req.url, headers: req.headers });
  req.resume().on('end', () => res.writeHead(204).end());
});
let port = 0;
beforeAll(async () => {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  port = (server.address() as AddressInfo).port;
});
afterAll(() => new Promise((resolve) => server.close(resolve)));

const feedEvent = (id: string) =>
  ({
    id,
    type: 'reward.created',
    consumer_id: 'c_1',
    user_id: null,
    reward_id: '0b4c6f0e-5d0a-4a52-9a43-6b1a8f0c2d11',
    data: {},
    created_at: new Date(),
  }) as Parameters<WebhookSender['send']>[0];

it('POSTs to the path as given, with user:password@ of the URL as HTTP Basic', async () => {
  seen = [];
  const sender = new WebhookSender({
    url: `http://hook:p%40ss@127.0.0.1:${port}/hooks/perks/?t=1`,
    secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
    timeoutMs: 2000,
    connections: 1,
  });
  try {
    await sender.send(feedEvent('7'));
  } finally {
    await sender.close();
  }
  expect(seen).toHaveLength(1);
  expect(seen[0]?.url).toBe('/hooks/perks/?t=1');
  const basic = Buffer.from('hook:p@ss').toString('base64');
  expect(seen[0]?.headers.authorization).toBe(`Basic ${basic}`);
});

it('check fails a WEBHOOK_URL that redirects: deliveries would not follow it', async () => {
  const { checkWebhook } = await import('../../src/cli/check-edges.js');
  const redirecting = createServer((_req, res) => res.writeHead(308, { location: '/x/' }).end());
  await new Promise<void>((resolve) => redirecting.listen(0, '127.0.0.1', resolve));
  try {
    const { port: at } = redirecting.address() as AddressInfo;
    const result = await checkWebhook(`http://127.0.0.1:${at}/x`);
    expect(JSON.stringify(result)).toContain('HEAD answered 308, a redirect');
    expect(JSON.stringify(await checkWebhook(`http://127.0.0.1:${port}/hooks/perks/`))).toContain(
      'reachable (HEAD answered 204)',
    );
  } finally {
    await new Promise((resolve) => redirecting.close(resolve));
  }
});

it('WEBHOOK_TIMEOUT_MS bounds the whole exchange: a receiver trickling its answer holds no slot', async () => {
  // A byte every 100 ms, never ending: undici's bodyTimeout (the gap between chunks) never fires.
  const trickling = createServer((req, res) => {
    req.resume().on('end', () => {
      res.writeHead(req.url === '/ok' ? 200 : 503);
      const timer = setInterval(() => res.write('x'), 100);
      res.on('close', () => clearInterval(timer));
    });
  });
  await new Promise<void>((resolve) => trickling.listen(0, '127.0.0.1', resolve));
  const { port: at } = trickling.address() as AddressInfo;
  const event = feedEvent('8');
  const senderFor = (path: string) =>
    new WebhookSender({
      url: `http://127.0.0.1:${at}${path}`,
      secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
      timeoutMs: 500,
      connections: 1,
    });
  const [ok, refusing] = [senderFor('/ok'), senderFor('/refusing')];
  try {
    // Without the bound, each would read on for minutes: past this test's own timeout.
    await expect(ok.send(event)).resolves.toBeUndefined();
    await expect(refusing.send(event)).rejects.toThrow(/answered 503: x/);
  } finally {
    trickling.closeAllConnections();
    trickling.close();
    await Promise.all([ok.close(), refusing.close()]);
  }
});
