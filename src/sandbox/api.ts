/** The Perks API: first a gateway's faults, rate limit and latency, then token, scope, version. */
import type { IncomingMessage } from 'node:http';
import { applyFault, type FaultController } from './faults.js';
import type { Reply } from './reply.js';
import type { SandboxSettings } from './server.js';
import type { SandboxState } from './state.js';
import { basicClient, type TokenAuthority } from './tokens.js';
import { rewardPathErrors, validateEnrollment, validateRewardList } from './validation.js';

const supportedApiVersions: readonly string[] = ['2.0.0'];
const maxBodyBytes = 1024 * 1024;

/** What a request handler, API or control, may use. */
export type SandboxContext = SandboxSettings & {
  state: SandboxState;
  faults: FaultController;
  tokens: TokenAuthority;
  reset(): void;
};

export type ParsedBody =
  | { kind: 'empty' }
  | { kind: 'json'; value: unknown }
  | { kind: 'form'; value: URLSearchParams }
  | { kind: 'malformed' };

/** A top-level field of a JSON or form body. */
function field(body: ParsedBody, name: string): unknown {
  if (body.kind === 'form') return body.value.get(name) ?? undefined;
  return body.kind === 'json' ? (body.value as Record<string, unknown> | null)?.[name] : undefined;
}

export async function handleApi(ctx: SandboxContext, url: URL, reply: Reply): Promise<void> {
  const method = reply.req.method ?? 'GET';
  const target = matchRoute(method, url.pathname);
  ctx.state.countRequest(target?.route ?? 'unknown');
  if (!target) return reply.error(404, 'ERR-404-00', { instance: url.pathname });
  const body = method === 'POST' ? await readBody(reply.req) : ({ kind: 'empty' } as const);
  const enrolling =
    target.route === 'enroll' && body.kind === 'json' ? field(body, 'id') : undefined;
  reply.consumerId = target.consumerId ?? (typeof enrolling === 'string' ? enrolling : undefined);
  const fault = ctx.faults.take(target.route, reply.consumerId);
  if (fault && applyFault(fault, target.route, reply)) return;
  if (target.route === 'token') return issueToken(ctx, body, reply);
  if (ctx.state.overRateLimit(reply.req.headers.authorization ?? '')) {
    return reply.send(429, 'Too Many Requests', 'text/plain', { 'retry-after': '1' });
  }
  // At once, not after the latency: a gateway counting requests in flight refuses on arrival.
  if (!ctx.state.admit(reply.res)) {
    reply.immediate = true;
    return reply.send(429, 'Too Many Requests', 'text/plain', { 'retry-after': '0' });
  }
  if (!(await authorize(ctx, reply))) return;
  if (target.route === 'enroll') enrollConsumer(ctx, body, reply);
  else if (target.route === 'listRewards') listRewards(ctx, target.consumerId, url, reply);
  else getReward(ctx, target.consumerId, target.rewardId, reply);
}

async function issueToken(ctx: SandboxContext, body: ParsedBody, reply: Reply): Promise<void> {
  const clientId = basicClient(reply.req.headers.authorization, ctx.tokens.clients);
  if (clientId === undefined) {
    return reply.error(401, 'ERR-401-00', {
      headers: { 'www-authenticate': 'Basic realm="perks"' },
    });
  }
  if (!versionAccepted(reply)) return;
  if (body.kind === 'malformed') return reply.error(400, 'ERR-400-00', { errors: [] });
  const grantType = field(body, 'grant_type');
  if (grantType !== undefined && grantType !== 'client_credentials') {
    const msg = "Input should be 'client_credentials'";
    const errors = [{ loc: ['grant_type'], msg, type: 'literal_error' }];
    return reply.error(400, 'ERR-400-00', { errors });
  }
  const scopes = grantedScopes(ctx.scopes, field(body, 'scope'));
  if (scopes.length === 0) {
    const msg = 'No requested scope is allowed';
    const errors = [{ loc: ['scope'], msg, type: 'value_error' }];
    return reply.error(400, 'ERR-400-00', { errors });
  }
  const minted = await ctx.state.mintToken(clientId, scopes);
  reply.send(200, JSON.stringify(minted), 'application/json', { 'cache-control': 'no-store' });
}

function grantedScopes(allowed: readonly string[], requested: unknown): string[] {
  if (typeof requested !== 'string' || requested.trim() === '') return [...allowed];
  const wanted = requested.trim().split(/\s+/);
  return allowed.includes('ALL') ? wanted : wanted.filter((s) => allowed.includes(s));
}

/** Bearer token, scope and API version, in that order; false once answered with the error. */
async function authorize(ctx: SandboxContext, reply: Reply): Promise<boolean> {
  const grant = await ctx.tokens.check(reply.req.headers.authorization);
  const scopes = grant?.scope.split(' ') ?? [];
  const scoped = scopes.includes('PERKS') || scopes.includes('ALL');
  if (!grant) {
    reply.error(401, 'ERR-401-00');
  } else if (!scoped || grant.program !== ctx.tokens.program || grant.environment !== 'sandbox') {
    reply.error(403, 'ERR-403-00');
  } else {
    return versionAccepted(reply);
  }
  return false;
}

/** The x-api-version header, mandatory on every call (POST /tokens too); false once refused. */
function versionAccepted(reply: Reply): boolean {
  const version = reply.req.headers['x-api-version'];
  const loc = ['header', 'x-api-version'];
  if (version === undefined || version === '') {
    const errors = [{ loc, msg: 'Field required', type: 'missing' }];
    reply.error(400, 'ERR-400-01', { title: 'Missing API Version', errors });
  } else if (typeof version !== 'string' || !supportedApiVersions.includes(version.trim())) {
    const msg = `Unsupported version; supported: ${supportedApiVersions.join(', ')}`;
    const errors = [{ loc, msg, type: 'value_error' }];
    reply.error(400, 'ERR-400-02', { title: 'Unsupported API Version', errors });
  } else {
    return true;
  }
  return false;
}

function enrollConsumer(ctx: SandboxContext, body: ParsedBody, reply: Reply) {
  const checked = validateEnrollment(body);
  if (!checked.ok) return reply.error(400, 'ERR-400-00', { errors: checked.errors });
  const id = checked.value;
  if (ctx.state.enroll(id, ctx.rewardsOnEnroll) === 'conflict') {
    return reply.error(409, 'ERR-409-00', { instance: `/perks/consumers/${id}` });
  }
  reply.json(201, { id });
}

function listRewards(ctx: SandboxContext, consumerId: string, url: URL, reply: Reply) {
  const query = validateRewardList(consumerId, url.searchParams);
  if (!query.ok) return reply.error(400, 'ERR-400-00', { errors: query.errors });
  if (!ctx.state.isEnrolled(consumerId))
    return notEnrolled(reply, `/perks/consumers/${consumerId}`);
  reply.send(200, ctx.state.rewardPageBody(consumerId, query.value), 'application/json');
}

function getReward(ctx: SandboxContext, consumerId: string, rewardId: string, reply: Reply) {
  const errors = rewardPathErrors(consumerId, rewardId);
  if (errors.length > 0) return reply.error(400, 'ERR-400-00', { errors });
  const instance = `/perks/consumers/${consumerId}/rewards/${rewardId}`;
  if (!ctx.state.isEnrolled(consumerId)) return notEnrolled(reply, instance);
  const text =
    ctx.state.rewardText(consumerId, rewardId) ??
    ctx.state.rewardText(consumerId, rewardId.toLowerCase());
  if (text === undefined) reply.error(404, 'ERR-404-00', { instance });
  else reply.send(200, text, 'application/json');
}

function notEnrolled(reply: Reply, instance: string): void {
  reply.error(404, 'ERR-404-02', { title: 'Consumer Not Enrolled', instance });
}

function matchRoute(method: string, pathname: string) {
  if (method === 'POST' && pathname === '/tokens') return { route: 'token' } as const;
  if (method === 'POST' && pathname === '/perks/consumers') return { route: 'enroll' } as const;
  const match = /^\/perks\/consumers\/([^/]*)\/rewards(?:\/([^/]+))?\/?$/.exec(pathname);
  if (method !== 'GET' || !match) return undefined;
  const consumerId = decodeSegment(match[1] ?? '');
  if (match[2] === undefined) return { route: 'listRewards', consumerId } as const;
  return { route: 'getReward', consumerId, rewardId: decodeSegment(match[2]) } as const;
}

/** As it came when it is not valid percent-encoding. */
export function decodeSegment(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
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
  if (req.headers['content-type']?.includes('application/x-www-form-urlencoded')) {
    return { kind: 'form', value: new URLSearchParams(text) };
  }
  try {
    return { kind: 'json', value: JSON.parse(text) as unknown };
  } catch {
    return { kind: 'malformed' };
  }
}
