/**
 * One webhook delivery: the event as JSON signed per Standard Webhooks (`webhook-id`,
 * `webhook-timestamp`, `webhook-signature`), POSTed once. A 2xx is a delivery; any other
 * answer, or none within the timeout, is a DeliveryError to retry.
 */
import { Webhook } from 'standardwebhooks';
import { Pool } from 'undici';
import { linkSignals } from '../signals.js';
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
    // One deadline over the whole exchange, body included: undici's bodyTimeout is the gap
    // between two chunks, and a receiver trickling its answer would hold a delivery slot.
    const { timeoutMs } = this.options;
    const linked = linkSignals([signal], timeoutMs);
    try {
      const response = await this.#pool
        .request({
          method: 'POST',
          path: `${this.#url.pathname}${this.#url.search}`,
          headers,
          body: payload,
          headersTimeout: timeoutMs,
          bodyTimeout: timeoutMs,
          signal: linked.signal,
        })
        .catch((error: { code?: string; name: string }) => {
          const why = linked.timedOut()
            ? `none within ${timeoutMs} ms`
            : (error.code ?? error.name);
          throw new DeliveryError(`no answer from the webhook receiver (${why})`);
        });
      if (response.statusCode >= 200 && response.statusCode < 300) {
        // Read to its end (the connection is kept), or given up at the deadline: delivered.
        await response.body.dump().catch(() => undefined);
        return;
      }
      const text = await snippet(response.body);
      const quoted = text.replace(/\s+/g, ' ').trim().slice(0, maxQuotedBody);
      throw new DeliveryError(
        `the webhook receiver answered ${response.statusCode}${quoted ? `: ${quoted}` : ''}`,
      );
    } finally {
      linked.dispose();
    }
  }

  close(): Promise<void> {
    return this.#pool.close();
  }
}

/**
 * The start of a body, for an error message, as much as came before the deadline; the rest is
 * left unread (the stream is dropped).
 */
async function snippet(body: AsyncIterable<Buffer> & { destroy(): unknown }): Promise<string> {
  let text = '';
  try {
    for await (const chunk of body) {
      text += chunk.toString('utf8');
      if (text.length >= maxQuotedBody) break;
    }
  } catch {
    // Aborted at the deadline, or the connection lost: what came is enough.
  }
  body.destroy();
  return text;
}
