/**
 * The sandbox HTTP server: routes a request to the control API or to the Perks API, and in
 * front of the API applies what a gateway would (injected faults, per-token rate limit,
 * added latency) before the application checks the token, scope and version.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import {
  type ApiContext,
  authorize,
  enrollConsumer,
  getReward,
  issueToken,
  listRewards,
} from './api.js';
import { type ControlContext, handleControl } from './control.js';
import { applyFault } from './fault-responses.js';
import { FaultController } from './faults.js';
import { RateLimiter } from './rate-limit.js';
import { Reply, type TimerSet } from './reply.js';
import { decodeSegment, enrollmentId, matchRoute, readBody } from './request.js';
import type { Scenario } from './scenario.js';
import { type RewardsPerConsumer, SandboxState } from './state.js';
import { knownScopes, TokenAuthority } from './tokens.js';

export interface SandboxOptions {
  /** Interface to listen on. Default 127.0.0.1. */
  host?: string;
  /** Port; 0 (the default) picks a free one, see `baseUrl`. */
  port?: number;
  /** Seed of the generated data: the same seed gives the same consumers and rewards. Default 1. */
  seed?: number;
  /** Enrolled consumers generated at start, ids sbx_0001, sbx_0002, ... Default 0. */
  consumers?: number;
  /** Rewards of each generated consumer: a fixed count or a range. Default {min: 0, max: 30}. */
  rewardsPerConsumer?: RewardsPerConsumer;
  /** Rewards generated for a consumer enrolled through the API for the first time. Default 0. */
  rewardsOnEnroll?: number;
  /**
   * Any valid consumer id the sandbox does not hold is answered as enrolled with no rewards,
   * without storing it (benchmarks of a million consumers). Enrolling one through the API
   * still creates it. Default false.
   */
  autoEnroll?: boolean;
  /** Default 'sandbox-client'. */
  clientId?: string;
  /** Must look like sk_sandbox_...; default 'sk_sandbox_demo_secret'. */
  clientSecret?: string;
  /** Scopes granted to the client (ALL, LOYALTIES, PERKS, TX_INJECTION). Default ['PERKS']. */
  scopes?: string[];
  /** Program reference carried in tokens. Default 'sandbox-program'. */
  program?: string;
  /** Lifetime of minted tokens, whole seconds. Default 3600. */
  tokenTtlSeconds?: number;
  /** Added to every API response, for benchmarks. Default 0. */
  latencyMs?: number;
  /** Requests per second per token before text/plain 429s. Default: no limit. */
  rateLimitPerSecond?: number;
  /** Extra consumers, settings and faults to start with. */
  scenario?: Scenario;
  /** Receives one line at start and unexpected errors; never a token or secret. */
  logger?: Logger;
}

export interface Sandbox {
  /** Server root, e.g. http://127.0.0.1:4010 (PERKS_BASE_URL). */
  baseUrl: string;
  clientId: string;
  clientSecret: string;
  state: SandboxState;
  faults: FaultController;
  /** Mints a token without credentials, e.g. for another program or scope (403 tests). */
  mintToken(opts?: {
    scopes?: string[];
    program?: string;
    environment?: string;
    ttlSeconds?: number;
  }): Promise<string>;
  /** Back to the seeded data, no faults, empty counters and log, settings as started. */
  reset(): void;
  /** Closes the server and every socket, and cancels held responses. */
  close(): Promise<void>;
}

/**
 * The variables that point a worker at this sandbox (PERKS_BASE_URL and its credentials),
 * as `perks-worker sandbox` prints them and as tests and benchmarks spawn `work` with them.
 */
export function sandboxApiEnv(
  sandbox: Pick<Sandbox, 'baseUrl' | 'clientId' | 'clientSecret'>,
): Record<'PERKS_BASE_URL' | 'PERKS_CLIENT_ID' | 'PERKS_CLIENT_SECRET', string> {
  return {
    PERKS_BASE_URL: sandbox.baseUrl,
    PERKS_CLIENT_ID: sandbox.clientId,
    PERKS_CLIENT_SECRET: sandbox.clientSecret,
  };
}

export async function startSandbox(options: SandboxOptions = {}): Promise<Sandbox> {
  const settings = resolveOptions(options);
  const state = new SandboxState(settings.seed, settings.autoEnroll);
  const faults = new FaultController();
  const tokens = await TokenAuthority.create(settings.program, settings.tokenTtlSeconds);
  const limiter = new RateLimiter(undefined);
  const timers: TimerSet = new Set();
  let latencyMs = 0;

  state.revokeTokens = () => tokens.revokeAll();
  state.setLatency = (ms) => {
    latencyMs = ms;
  };
  state.setRateLimit = (perSecond) => limiter.set(perSecond);

  const seed = () => {
    for (let i = 1; i <= settings.consumers; i++) {
      const id = `sbx_${String(i).padStart(4, '0')}`;
      state.addConsumerWithDistribution(id, settings.rewardsPerConsumer);
    }
    const scenario = options.scenario;
    for (const c of scenario?.consumers ?? []) state.addConsumer(c.id, c);
    for (const fault of scenario?.faults ?? []) faults.inject(fault);
    // Explicit options win over the scenario's settings (a command-line flag over a file).
    latencyMs = options.latencyMs ?? scenario?.latencyMs ?? 0;
    limiter.set(options.rateLimitPerSecond ?? scenario?.rateLimitPerSecond);
  };
  const reset = () => {
    state.clear();
    faults.clear();
    seed();
  };
  seed();

  const api: ApiContext = {
    state,
    tokens,
    clientId: settings.clientId,
    clientSecret: settings.clientSecret,
    scopes: settings.scopes,
    rewardsOnEnroll: settings.rewardsOnEnroll,
  };
  const control: ControlContext = {
    state,
    faults,
    tokens,
    settings: () => ({ latencyMs, rateLimitPerSecond: limiter.limit ?? null }),
    reset,
  };

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const url = new URL(req.url ?? '/', 'http://sandbox');
    const method = req.method ?? 'GET';
    if (url.pathname.startsWith('/_sandbox/')) {
      const reply = new Reply(req, res, 0, timers, () => {});
      const segments = url.pathname.slice('/_sandbox/'.length).split('/').filter(Boolean);
      await handleControl(control, method, segments.map(decodeSegment), await readBody(req), reply);
      return;
    }
    const reply = new Reply(req, res, latencyMs, timers, (e) => state.recordRequest(e));
    const target = matchRoute(method, url.pathname);
    state.countRequest(target?.route ?? 'unknown');
    if (!target) {
      reply.error(404, 'ERR-404-00', { instance: url.pathname });
      return;
    }
    const body = method === 'POST' ? await readBody(req) : ({ kind: 'empty' } as const);
    reply.consumerId = target.consumerId ?? enrollmentId(target.route, body);
    const fault = faults.take(target.route, reply.consumerId);
    if (fault && applyFault(fault, target.route, reply) === 'answered') return;
    if (target.route === 'token') {
      await issueToken(api, req, body, reply);
      return;
    }
    const wait = limiter.hit(req.headers.authorization ?? '');
    if (wait !== undefined) {
      reply.send(429, 'Too Many Requests', 'text/plain', { 'retry-after': String(wait) });
      return;
    }
    if (!(await authorize(api, req, reply))) return;
    if (target.route === 'enroll') enrollConsumer(api, body, reply);
    else if (target.route === 'listRewards') listRewards(api, target.id, url.searchParams, reply);
    else if (target.route === 'getReward') getReward(api, target.id, target.rewardId, reply);
  };

  const server = createServer((req, res) => {
    handle(req, res).catch((error: unknown) => {
      settings.logger?.error({ err: error, path: req.url }, 'sandbox request failed');
      if (!res.headersSent && !res.destroyed) {
        res.writeHead(500, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({ code: 'ERR-500-00', title: 'Internal Server Error', status: 500 }),
        );
      }
    });
  });
  server.keepAliveTimeout = 5_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(settings.port, settings.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const baseUrl = `http://${host}:${address.port}`;
  settings.logger?.debug({ baseUrl, consumers: settings.consumers }, 'sandbox listening');

  return {
    baseUrl,
    clientId: settings.clientId,
    clientSecret: settings.clientSecret,
    state,
    faults,
    reset,
    mintToken: async (opts = {}) => {
      const minted = await tokens.mint('sandbox-control', opts.scopes ?? settings.scopes, opts);
      state.countTokenMinted();
      return minted.access_token;
    },
    close: async () => {
      for (const timer of timers) clearTimeout(timer);
      timers.clear();
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeAllConnections();
      await closed;
    },
  };
}

function resolveOptions(options: SandboxOptions) {
  const clientSecret = options.clientSecret ?? 'sk_sandbox_demo_secret';
  if (!/^sk_sandbox_\S+$/.test(clientSecret)) {
    throw new RangeError('clientSecret must look like sk_sandbox_...');
  }
  const scopes = options.scopes ?? ['PERKS'];
  const unknown = scopes.filter((s) => !(knownScopes as readonly string[]).includes(s));
  if (unknown.length > 0) throw new RangeError(`unknown scopes: ${unknown.join(', ')}`);
  const ttl = options.tokenTtlSeconds ?? 3600;
  if (!Number.isInteger(ttl) || ttl < 1) {
    throw new RangeError('tokenTtlSeconds must be a whole number ≥ 1');
  }
  return {
    host: options.host ?? '127.0.0.1',
    port: options.port ?? 0,
    seed: options.seed ?? 1,
    consumers: options.consumers ?? 0,
    rewardsPerConsumer: options.rewardsPerConsumer ?? { min: 0, max: 30 },
    rewardsOnEnroll: options.rewardsOnEnroll ?? 0,
    autoEnroll: options.autoEnroll ?? false,
    clientId: options.clientId ?? 'sandbox-client',
    clientSecret,
    scopes,
    program: options.program ?? 'sandbox-program',
    tokenTtlSeconds: ttl,
    logger: options.logger,
  };
}
