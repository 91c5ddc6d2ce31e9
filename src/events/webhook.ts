/**
 * One webhook delivery: the event as JSON signed per Standard Webhooks (`webhook-id`,
 * `webhook-timestamp`, `webhook-signature`), POSTed once. A 2xx is a delivery; any other
 * answer, or none within the timeout, is a DeliveryError to retry.
 */
import { Webhook } from 'standardwebhooks';
import { Pool } from 'undici';
import type { FeedEvent } from '../store/event-deliveries.js';

class DeliveryError extends Error {
  override readonly name = 'DeliveryError';
}

export interface WebhookSenderOptions {
  url: string;
  /** `whsec_` + base64. */
  secret: string;
  timeoutMs: number;
  connections: number;
}

/** A receiver's answer is quoted in errors this far at most. */
const maxQuotedBody = 200;

export class WebhookSender {
  readonly #url: URL;
  readonly #signer: Webhook;
  readonly #pool: Pool;
  readonly #authorization: { authorization: string } | undefined;

  constructor(private readonly options: WebhookSenderOptions) {
    this.#url = new URL(options.url);
    const { username, password } = this.#url;
    const basic = `${decodeURIComponent(username)}:${decodeURIComponent(password)}`;
    this.#authorization =
      username || password
        ? { authorization: `Basic ${Buffer.from(basic).toString('base64')}` }
        : undefined;
    this.#signer = new Webhook(options.secret);
    this.#pool = new Pool(this.#url.origin, { connections: options.connections });
  }

  /** POSTs one event. Resolves on a 2xx; rejects with a DeliveryError otherwise. */
  async send(event: FeedEvent, signal?: AbortSignal): Promise<void> {
    // The feed row, with the consumer (and your user id, when known) in `data` beside the feed's
    // own data. Its `id` is also the `webhook-id`, the same on every retry, to deduplicate on.
    const id = `evt_${event.id}`;
    const data = { consumer_id: event.consumer_id, user_id: event.user_id, ...event.data };
    const created_at = event.created_at.toISOString();
    const payload = JSON.stringify({ id, type: event.type, created_at, data });
    const now = new Date();
    const headers = {
      'content-type': 'application/json',
      'user-agent': 'perks-worker',
      'webhook-id': id,
      'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
      'webhook-signature': this.#signer.sign(id, now, payload),
      ...this.#authorization,
    };
    const response = await this.#pool
      .request({
        method: 'POST',
        path: `${this.#url.pathname}${this.#url.search}`,
        headers,
        body: payload,
        headersTimeout: this.options.timeoutMs,
        bodyTimeout: this.options.timeoutMs,
        ...(signal ? { signal } : {}),
      })
      .catch((error: { code?: string; name: string }) => {
        throw new DeliveryError(
          `no answer from the webhook receiver (${error.code ?? error.name})`,
        );
      });
    const text = await snippet(response.body).catch(() => '');
    if (response.statusCode >= 200 && response.statusCode < 300) return;
    const quoted = text.replace(/\s+/g, ' ').trim().slice(0, maxQuotedBody);
    throw new DeliveryError(
      `the webhook receiver answered ${response.statusCode}${quoted ? `: ${quoted}` : ''}`,
    );
  }

  close(): Promise<void> {
    return this.#pool.close();
  }
}

/** The start of a body, for an error message; the rest is left unread (the stream is dropped). */
async function snippet(body: AsyncIterable<Buffer> & { destroy(): unknown }): Promise<string> {
  let text = '';
  for await (const chunk of body) {
    text += chunk.toString('utf8');
    if (text.length >= maxQuotedBody) break;
  }
  body.destroy();
  return text;
}
