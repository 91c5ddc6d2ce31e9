/**
 * A webhook receiver for tests that checks every delivery by the Standard Webhooks
 * specification itself (HMAC-SHA256 of `id.timestamp.body` under the base64 key after
 * `whsec_`), not by our code or the package we sign with. It can be told to refuse.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { createServer, type Server } from 'node:http';

export interface Delivery {
  id: string;
  timestamp: number;
  body: { id: string; type: string; created_at: string; data: Record<string, unknown> };
  /** True when one of the `v1,` signatures matches. */
  valid: boolean;
}

export interface WebhookReceiver {
  url: string;
  secret: string;
  /** Every delivery answered 2xx, in arrival order (a redelivery appears again). */
  accepted: Delivery[];
  /** Deliveries answered with a refusal. */
  refused: number;
  /** Answer this status (e.g. 500) instead of 204 until set back to undefined. */
  refuseWith: number | undefined;
  /** Hold the answers to this consumer's events this long (a slow endpoint for it). */
  slow: { consumerId: string; ms: number } | undefined;
  close(): Promise<void>;
}

export async function startWebhookReceiver(): Promise<WebhookReceiver> {
  const secret = `whsec_${randomBytes(32).toString('base64')}`;
  const key = Buffer.from(secret.slice('whsec_'.length), 'base64');
  const receiver: WebhookReceiver = {
    url: '',
    secret,
    accepted: [],
    refused: 0,
    refuseWith: undefined,
    slow: undefined,
    close: async () => {},
  };
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (receiver.refuseWith !== undefined) {
        receiver.refused += 1;
        res.writeHead(receiver.refuseWith).end('refused for the test');
        return;
      }
      const raw = Buffer.concat(chunks).toString('utf8');
      const id = String(req.headers['webhook-id'] ?? '');
      const timestamp = String(req.headers['webhook-timestamp'] ?? '');
      const expected = createHmac('sha256', key).update(`${id}.${timestamp}.${raw}`).digest();
      const valid = String(req.headers['webhook-signature'] ?? '')
        .split(' ')
        .some((sig) => {
          const [version, value = ''] = sig.split(',');
          const given = Buffer.from(value, 'base64');
          return (
            version === 'v1' && given.length === expected.length && timingSafeEqual(given, expected)
          );
        });
      const body = JSON.parse(raw) as Delivery['body'];
      const { slow } = receiver;
      const hold = slow && slow.consumerId === body.data.consumer_id ? slow.ms : 0;
      setTimeout(() => {
        receiver.accepted.push({ id, timestamp: Number(timestamp), body, valid });
        res.writeHead(204).end();
      }, hold);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  receiver.url = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}/hooks/perks`;
  receiver.close = async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  };
  return receiver;
}

/** The event ids each consumer received, in arrival order. */
export function idsByConsumer(deliveries: readonly Delivery[]): Map<string, number[]> {
  const byConsumer = new Map<string, number[]>();
  for (const d of deliveries) {
    const consumer = String(d.body.data.consumer_id);
    const list = byConsumer.get(consumer) ?? [];
    list.push(Number(d.id.replace('evt_', '')));
    byConsumer.set(consumer, list);
  }
  return byConsumer;
}
