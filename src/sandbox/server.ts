/**
 * Routes a request to the control API or the Perks API, applying in front of the API what a
 * gateway would (faults, per-token rate limit, latency) before token, scope and version checks.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { z } from 'zod';
import {
  type ApiContext,
  authorize,
  decodeSegment,
  enrollConsumer,
  enrollmentId,
  getReward,
  issueToken,
  listRewards,
  matchRoute,
  readBody,
} from './api.js';
import { type ControlContext, handleControl } from './control.js';
import { applyFault, FaultController } from './faults.js';
import { Reply, type TimerSet } from './reply.js';
import type { Scenario } from './scenario.js';
import { SandboxState } from './state.js';
import { knownScopes, TokenAuthority } from './tokens.js';

const optionsSchema = z.object({
  host: z.string().default('127.0.0.1'),
  /** 0 picks a free port, see `baseUrl`. */
  port: z.int().min(0).default(0),
  /** The same seed gives the same consumers and rewards. */
  seed: z.number().default(1),
  /** Enrolled consumers generated at start, ids sbx_0001, sbx_0002, ... */
  consumers: z.int().min(0).default(0),
  rewardsPerConsumer: z
    .union([z.int().min(0), z.object({ min: z.int().min(0), max: z.int().min(0) })])
    .default({ min: 0, max: 30 }),
  /** Rewards generated for a consumer enrolled through the API for the first time. */
  rewardsOnEnroll: z.int().min(0).default(0),
  /** An unknown consumer id answers as enrolled with no rewards, without being stored. */
  autoEnroll: z.boolean().default(false),
  clientId: z.string().default('sandbox-client'),
  clientSecret: z
    .string()
    .regex(/^sk_sandbox_\S+$/, { error: 'must look like sk_sandbox_...' })
    .default('sk_sandbox_demo_secret'),
  scopes: z.array(z.enum(knownScopes)).default(['PERKS']),
  program: z.string().default('sandbox-program'),
  tokenTtlSeconds: z.int().min(1).default(3600),
  /** Added to every API response; default the scenario's, else 0. */
  latencyMs: z.int().min(0).optional(),
  /** Requests per second per token before text/plain 429s; default the scenario's, else none. */
  rateLimitPerSecond: z.number().positive().optional(),
  scenario: z.custom<Scenario>().optional(),
  /** One line at start and unexpected errors; never a secret. */
  logger: z.custom<Logger>().optional(),
});

export type SandboxOptions = z.input<typeof optionsSchema>;

export type Sandbox = Awaited<ReturnType<typeof startSandbox>>;

/** The variables that point a worker at this sandbox. */
export function sandboxApiEnv(
  sandbox: Pick<Sandbox, 'baseUrl' | 'clientId' | 'clientSecret'>,
): Record<'PERKS_BASE_URL' | 'PERKS_CLIENT_ID' | 'PERKS_CLIENT_SECRET', string> {
  return {
    PERKS_BASE_URL: sandbox.baseUrl,
    PERKS_CLIENT_ID: sandbox.clientId,
    PERKS_CLIENT_SECRET: sandbox.clientSecret,
  };
}

export async function startSandbox(options: SandboxOptions = {}) {
  const parsed = optionsSchema.safeParse(options);
  if (!parsed.success) throw new RangeError(`sandbox options: ${z.prettifyError(parsed.error)}`);
  const settings = parsed.data;
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
    const { scenario } = settings;
    for (const c of scenario?.consumers ?? []) state.addConsumer(c.id, c);
    for (const fault of scenario?.faults ?? []) faults.inject(fault);
    // An option wins over the scenario's setting.
    latencyMs = settings.latencyMs ?? scenario?.latencyMs ?? 0;
    limiter.set(settings.rateLimitPerSecond ?? scenario?.rateLimitPerSecond);
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
      const body = await readBody(req);
      return handleControl(control, method, segments.map(decodeSegment), body, reply);
    }
    const reply = new Reply(req, res, latencyMs, timers, (e) => state.recordRequest(e));
    const target = matchRoute(method, url.pathname);
    state.countRequest(target?.route ?? 'unknown');
    if (!target) return reply.error(404, 'ERR-404-00', { instance: url.pathname });
    const body = method === 'POST' ? await readBody(req) : ({ kind: 'empty' } as const);
    reply.consumerId = target.consumerId ?? enrollmentId(target.route, body);
    const fault = faults.take(target.route, reply.consumerId);
    if (fault && applyFault(fault, target.route, reply) === 'answered') return;
    if (target.route === 'token') return issueToken(api, req, body, reply);
    const wait = limiter.hit(req.headers.authorization ?? '');
    if (wait !== undefined) {
      return reply.send(429, 'Too Many Requests', 'text/plain', { 'retry-after': String(wait) });
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
    /** Seeded data, no faults, empty counters and log, settings as started. */
    reset,
    /** Without credentials, e.g. for another program or scope (403 tests). */
    mintToken: async (
      opts: { scopes?: string[]; program?: string; environment?: string; ttlSeconds?: number } = {},
    ): Promise<string> => {
      const minted = await tokens.mint('sandbox-control', opts.scopes ?? settings.scopes, opts);
      state.countTokenMinted();
      return minted.access_token;
    },
    close: async (): Promise<void> => {
      for (const timer of timers) clearTimeout(timer);
      timers.clear();
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeAllConnections();
      await closed;
    },
  };
}

/** The spec's "per-token request limits", in fixed one-second windows. */
class RateLimiter {
  private windows = new Map<string, { second: number; count: number }>();

  constructor(private perSecond: number | undefined) {}

  get limit(): number | undefined {
    return this.perSecond;
  }

  set(perSecond: number | undefined): void {
    this.perSecond = perSecond;
    this.windows.clear();
  }

  /** `key`: the Authorization header. The seconds to wait when over. */
  hit(key: string): number | undefined {
    if (this.perSecond === undefined) return undefined;
    const second = Math.floor(Date.now() / 1000);
    let window = this.windows.get(key);
    if (!window || window.second !== second) {
      // A token per request must not grow the map.
      if (this.windows.size > 10_000) this.windows.clear();
      window = { second, count: 0 };
      this.windows.set(key, window);
    }
    window.count++;
    return window.count > this.perSecond ? 1 : undefined;
  }
}
