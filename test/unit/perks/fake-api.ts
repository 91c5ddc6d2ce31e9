/**
 * A scripted Perks API on undici's MockAgent: tests describe responses as plain functions of
 * the request, and inspect every request the client made.
 */
import { randomUUID } from 'node:crypto';
import { MockAgent } from 'undici';
import { PerksClient, type PerksClientOptions } from '../../../src/perks/client.js';

export const ORIGIN = 'https://api.perks.test';
export const BASE_PATH = '/programs/acme';
export const CLIENT_ID = 'cli_test';
export const SECRET = 'sk_sandbox_VerySecretValue0123456789';

export interface SeenRequest {
  method: string;
  path: string;
  url: URL;
  headers: Record<string, string>;
  body: string | undefined;
}

export interface FakeResponse {
  status: number;
  body?: unknown;
  /** An array: the header sent once per value. */
  headers?: Record<string, string | string[]>;
  /** Thrown instead of answering: simulates a reset, refused connection, DNS failure. */
  error?: Error;
}

export type Handler = (req: SeenRequest) => FakeResponse;

/** A JWT-shaped token, different each mint, so leaks are detectable by value. */
export function fakeToken(n: number): string {
  const part = (s: string) => Buffer.from(s).toString('base64url');
  return `${part('{"alg":"ES256"}')}.${part(`{"sub":"cli_test","n":${n}}`)}.${part(`sig-${n}-${randomUUID()}`)}`;
}

export interface FakeApiOptions {
  /** Answers POST /tokens. Default: a fresh token valid one hour. */
  tokens?: Handler;
  /** Answers every other request. */
  api?: Handler;
  /** Registers interceptors that take precedence (delays, raw bodies). */
  prepend?: (pool: ReturnType<MockAgent['get']>) => void;
  client?: Partial<PerksClientOptions>;
}

export function fakeApi(options: FakeApiOptions = {}) {
  const agent = new MockAgent();
  agent.disableNetConnect();
  const pool = agent.get(ORIGIN);
  const requests: SeenRequest[] = [];
  const minted: string[] = [];
  const tokens: Handler =
    options.tokens ??
    (() => {
      const token = fakeToken(minted.length + 1);
      minted.push(token);
      return { status: 200, body: { access_token: token, token_type: 'Bearer', expires_in: 3600 } };
    });
  const api: Handler = options.api ?? (() => ({ status: 404, body: '' }));
  options.prepend?.(pool);
  pool
    .intercept({ path: () => true, method: () => true })
    .reply((opts) => {
      const url = new URL(opts.path, ORIGIN);
      const req: SeenRequest = {
        method: opts.method,
        path: opts.path,
        url,
        headers: Object.fromEntries(
          Object.entries((opts.headers ?? {}) as Record<string, string>).map(([k, v]) => [
            k.toLowerCase(),
            String(v),
          ]),
        ),
        body: typeof opts.body === 'string' ? opts.body : undefined,
      };
      requests.push(req);
      const handler = url.pathname === `${BASE_PATH}/tokens` ? tokens : api;
      const response = handler(req);
      if (response.error) throw response.error;
      const data =
        typeof response.body === 'string' || response.body === undefined
          ? (response.body ?? '')
          : JSON.stringify(response.body);
      const headers =
        response.headers ??
        (typeof response.body === 'object' ? { 'content-type': 'application/json' } : {});
      return { statusCode: response.status, data, responseOptions: { headers } };
    })
    .persist();

  const client = new PerksClient({
    baseUrl: `${ORIGIN}${BASE_PATH}`,
    clientId: CLIENT_ID,
    clientSecret: SECRET,
    dispatcher: agent,
    ...options.client,
    // Fast backoff unless a test asks otherwise.
    retry: { minDelayMs: 1, maxDelayMs: 5, ...options.client?.retry },
  });
  return {
    agent,
    pool,
    client,
    requests,
    minted,
    apiRequests: () => requests.filter((r) => !r.path.endsWith('/tokens')),
    tokenRequests: () => requests.filter((r) => r.path.endsWith('/tokens')),
    close: async () => {
      await client.close();
      await agent.close();
    },
  };
}

/** Answers the queued responses in order, then repeats the last one. */
export function sequence(...responses: FakeResponse[]): Handler {
  let i = 0;
  return () => {
    const response = responses[Math.min(i, responses.length - 1)];
    i += 1;
    if (!response) throw new Error('sequence() needs at least one response');
    return response;
  };
}

export function envelope(status: number, code: string, title: string, extra: object = {}) {
  return { status, body: { code, title, status, errors: null, instance: null, ...extra } };
}

let counter = 0;
/** A valid reward on the wire; override any field. */
export function wireReward(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  counter += 1;
  return {
    id: randomUUID(),
    amount: '12.50',
    created_at: `2024-05-01T10:00:${String(counter % 60).padStart(2, '0')}Z`,
    type: 'CASHBACK',
    status: 'VALIDATED',
    consumer_status: 'VALIDATION',
    transaction: { external_id: `tx-${counter}`, executed_at: '2024-04-30T09:00:00Z' },
    brand: { name: 'Acme', logo: 'https://cdn.perks.test/acme.png' },
    ...overrides,
  };
}

export const REWARD_ID = '3f1c2d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f';
export const CONSUMER = 'user_42';
