/** Small HTTP helpers for the sandbox tests: they speak to it as any client would. */
import { request } from 'undici';
import type { Sandbox } from '../../../src/sandbox/index.js';

export interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  /** The body parsed as JSON; throws if it is not JSON. */
  json: () => unknown;
}

export async function call(
  url: string,
  init: {
    method?: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
    headers?: Record<string, string>;
    body?: string;
    timeoutMs?: number;
  } = {},
): Promise<Answer> {
  const response = await request(url, {
    method: init.method ?? 'GET',
    headers: init.headers,
    body: init.body,
    // A client-side timeout, as the worker's client would have.
    signal: init.timeoutMs === undefined ? undefined : AbortSignal.timeout(init.timeoutMs),
  });
  const text = await response.body.text();
  return {
    status: response.statusCode,
    headers: response.headers,
    text,
    json: () => JSON.parse(text) as unknown,
  };
}

export function basicAuth(clientId: string, clientSecret: string): string {
  return `Basic ${Buffer.from(`${clientId}:${clientSecret}`).toString('base64')}`;
}

export async function fetchToken(sandbox: Sandbox): Promise<string> {
  const answer = await call(`${sandbox.baseUrl}/tokens`, {
    method: 'POST',
    headers: {
      authorization: basicAuth(sandbox.clientId, sandbox.clientSecret),
      'x-api-version': '2.0.0',
      'content-type': 'application/json',
    },
    body: '{"grant_type":"client_credentials"}',
  });
  if (answer.status !== 200) throw new Error(`token: ${answer.status} ${answer.text}`);
  return (answer.json() as { access_token: string }).access_token;
}

export function apiHeaders(token: string): Record<string, string> {
  return {
    authorization: `Bearer ${token}`,
    'x-api-version': '2.0.0',
    'content-type': 'application/json',
  };
}

/** A ready client: GET and POST with a valid token and version. */
export async function apiClient(sandbox: Sandbox) {
  const headers = apiHeaders(await fetchToken(sandbox));
  return {
    get: (path: string, extra: { timeoutMs?: number } = {}) =>
      call(`${sandbox.baseUrl}${path}`, { headers, ...extra }),
    post: (path: string, body: unknown, extra: { timeoutMs?: number } = {}) =>
      call(`${sandbox.baseUrl}${path}`, {
        method: 'POST',
        headers,
        body: typeof body === 'string' ? body : JSON.stringify(body),
        ...extra,
      }),
  };
}

export interface Envelope {
  code: string;
  title: string;
  status: number;
  errors: { loc: (string | number)[]; msg: string; type: string }[] | null;
  instance: string | null;
}

/** Asserts the body is exactly the spec's envelope (no other top-level keys) and returns it. */
export function envelopeOf(answer: Answer): Envelope {
  const ct = String(answer.headers['content-type']);
  if (!ct.startsWith('application/json')) throw new Error(`content-type ${ct}`);
  const body = answer.json() as Envelope;
  const keys = Object.keys(body).sort().join(',');
  if (keys !== 'code,errors,instance,status,title') throw new Error(`envelope keys ${keys}`);
  if (body.status !== answer.status) throw new Error(`status ${body.status} != ${answer.status}`);
  return body;
}
