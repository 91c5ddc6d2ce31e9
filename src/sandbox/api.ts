/**
 * The Perks API: what the server reads from a request (route, body, consumer), and the
 * operations, run after the server applied faults and the rate limit.
 */
import type { IncomingMessage } from 'node:http';
import type { ApiRoute } from './faults.js';
import type { Reply } from './reply.js';
import type { SandboxState } from './state.js';
import { parseBasic, secretMatches, type TokenAuthority } from './tokens.js';
import {
  consumerIdErrors,
  parseRewardListQuery,
  rewardIdErrors,
  validateEnrollment,
} from './validation.js';

const supportedApiVersions: readonly string[] = ['2.0.0'];

export interface ApiContext {
  state: SandboxState;
  tokens: TokenAuthority;
  clientId: string;
  clientSecret: string;
  scopes: readonly string[];
  rewardsOnEnroll: number;
}

export type ParsedBody =
  | { kind: 'empty' }
  | { kind: 'json'; value: unknown }
  | { kind: 'form'; value: URLSearchParams }
  | { kind: 'malformed' };

export async function issueToken(
  ctx: ApiContext,
  req: IncomingMessage,
  body: ParsedBody,
  reply: Reply,
): Promise<void> {
  const credentials = parseBasic(req.headers.authorization);
  if (
    credentials?.clientId !== ctx.clientId ||
    !secretMatches(credentials.clientSecret, ctx.clientSecret)
  ) {
    return reply.error(401, 'ERR-401-00', {
      headers: { 'www-authenticate': 'Basic realm="perks"' },
    });
  }
  if (body.kind === 'malformed') return reply.error(400, 'ERR-400-00', { errors: [] });
  const field = (name: string): unknown => {
    if (body.kind === 'form') return body.value.get(name) ?? undefined;
    if (body.kind === 'json' && typeof body.value === 'object' && body.value !== null) {
      return (body.value as Record<string, unknown>)[name];
    }
    return undefined;
  };
  const grantType = field('grant_type');
  if (grantType !== undefined && grantType !== 'client_credentials') {
    const msg = "Input should be 'client_credentials'";
    const errors = [{ loc: ['body', 'grant_type'], msg, type: 'literal_error' }];
    return reply.error(400, 'ERR-400-00', { errors });
  }
  const scopes = grantedScopes(ctx.scopes, field('scope'));
  if (scopes.length === 0) {
    const msg = 'No requested scope is allowed';
    return reply.error(400, 'ERR-400-00', {
      errors: [{ loc: ['body', 'scope'], msg, type: 'value_error' }],
    });
  }
  const minted = await ctx.tokens.mint(ctx.clientId, scopes);
  ctx.state.countTokenMinted();
  reply.send(200, JSON.stringify(minted), 'application/json', { 'cache-control': 'no-store' });
}

function grantedScopes(allowed: readonly string[], requested: unknown): string[] {
  if (typeof requested !== 'string' || requested.trim() === '') return [...allowed];
  const wanted = requested.trim().split(/\s+/);
  if (allowed.includes('ALL')) return wanted;
  return wanted.filter((s) => allowed.includes(s));
}

/** Bearer token, scope and API version, in that order; false once answered with the error. */
export async function authorize(
  ctx: ApiContext,
  req: IncomingMessage,
  reply: Reply,
): Promise<boolean> {
  const grant = await ctx.tokens.check(req.headers.authorization);
  if (!grant) {
    reply.error(401, 'ERR-401-00');
    return false;
  }
  const scoped = grant.scopes.includes('PERKS') || grant.scopes.includes('ALL');
  if (!scoped || grant.program !== ctx.tokens.program || grant.environment !== 'sandbox') {
    reply.error(403, 'ERR-403-00');
    return false;
  }
  const version = req.headers['x-api-version'];
  const loc = ['header', 'x-api-version'];
  if (version === undefined || version === '') {
    const errors = [{ loc, msg: 'Field required', type: 'missing' }];
    reply.error(400, 'ERR-400-01', { title: 'Missing API Version', errors });
    return false;
  }
  if (typeof version !== 'string' || !supportedApiVersions.includes(version.trim())) {
    const msg = `Unsupported version; supported: ${supportedApiVersions.join(', ')}`;
    const errors = [{ loc, msg, type: 'value_error' }];
    reply.error(400, 'ERR-400-02', { title: 'Unsupported API Version', errors });
    return false;
  }
  return true;
}

export function enrollConsumer(ctx: ApiContext, body: ParsedBody, reply: Reply) {
  // The spec: an empty errors means the body was not valid JSON.
  const checked =
    body.kind === 'malformed'
      ? { ok: false as const, errors: [] }
      : validateEnrollment(
          body.kind === 'json' ? body.value : body.kind === 'form' ? null : undefined,
        );
  if (!checked.ok) return reply.error(400, 'ERR-400-00', { errors: checked.errors });
  const id = checked.value;
  if (ctx.state.enroll(id, ctx.rewardsOnEnroll) === 'conflict') {
    return reply.error(409, 'ERR-409-00', { instance: `/perks/consumers/${id}` });
  }
  reply.json(201, { id });
}

export function listRewards(
  ctx: ApiContext,
  consumerId: string,
  params: URLSearchParams,
  reply: Reply,
) {
  const query = parseRewardListQuery(params);
  const errors = [
    ...consumerIdErrors(consumerId, ['path', 'consumer_id']),
    ...(query.ok ? [] : query.errors),
  ];
  if (errors.length > 0 || !query.ok) return reply.error(400, 'ERR-400-00', { errors });
  if (!ctx.state.isEnrolled(consumerId))
    return notEnrolled(reply, `/perks/consumers/${consumerId}`);
  reply.jsonText(200, ctx.state.rewardPageBody(consumerId, query.value));
}

export function getReward(ctx: ApiContext, consumerId: string, rewardId: string, reply: Reply) {
  const errors = [
    ...consumerIdErrors(consumerId, ['path', 'consumer_id']),
    ...rewardIdErrors(rewardId),
  ];
  if (errors.length > 0) return reply.error(400, 'ERR-400-00', { errors });
  const instance = `/perks/consumers/${consumerId}/rewards/${rewardId}`;
  if (!ctx.state.isEnrolled(consumerId)) return notEnrolled(reply, instance);
  const text =
    ctx.state.rewardText(consumerId, rewardId) ??
    ctx.state.rewardText(consumerId, rewardId.toLowerCase());
  if (text === undefined) reply.error(404, 'ERR-404-00', { instance });
  else reply.jsonText(200, text);
}

function notEnrolled(reply: Reply, instance: string): void {
  reply.error(404, 'ERR-404-02', { title: 'Consumer Not Enrolled', instance });
}

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
