/** What the server reads from a request: route, path parameters, body and consumer. */
import type { IncomingMessage } from 'node:http';
import type { ParsedBody } from './api.js';
import type { ApiRoute } from './faults.js';

const maxBodyBytes = 1024 * 1024;

type ApiTarget =
  | { route: 'token' | 'enroll'; consumerId?: undefined }
  | { route: 'listRewards'; id: string; consumerId: string }
  | { route: 'getReward'; id: string; rewardId: string; consumerId: string };

export function matchRoute(method: string, pathname: string): ApiTarget | undefined {
  if (method === 'POST' && pathname === '/tokens') return { route: 'token' };
  if (method === 'POST' && pathname === '/perks/consumers') return { route: 'enroll' };
  if (method !== 'GET') return undefined;
  const match = /^\/perks\/consumers\/([^/]*)\/rewards(?:\/([^/]+))?\/?$/.exec(pathname);
  if (!match) return undefined;
  const id = decodeSegment(match[1] ?? '');
  if (match[2] === undefined) return { route: 'listRewards', id, consumerId: id };
  return { route: 'getReward', id, rewardId: decodeSegment(match[2]), consumerId: id };
}

/** As it came when it is not valid percent-encoding. */
export function decodeSegment(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}

export function enrollmentId(route: ApiRoute, body: ParsedBody): string | undefined {
  if (route !== 'enroll' || body.kind !== 'json') return undefined;
  const value = body.value;
  if (typeof value !== 'object' || value === null) return undefined;
  const id = (value as Record<string, unknown>).id;
  return typeof id === 'string' ? id : undefined;
}

/** Over 1 MiB or unparsable is malformed. */
export async function readBody(req: IncomingMessage): Promise<ParsedBody> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > maxBodyBytes) return { kind: 'malformed' };
    chunks.push(chunk);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  if (text.trim() === '') return { kind: 'empty' };
  const type = req.headers['content-type'] ?? '';
  if (type.includes('application/x-www-form-urlencoded')) {
    return { kind: 'form', value: new URLSearchParams(text) };
  }
  try {
    return { kind: 'json', value: JSON.parse(text) as unknown };
  } catch {
    return { kind: 'malformed' };
  }
}
