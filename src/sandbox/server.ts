/** Starts the sandbox: /_sandbox/ goes to the control API, the rest to the Perks API. */
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { z } from 'zod';
import { closeServer } from '../ops/health.js';
import { handleApi } from './api.js';
import { handleControl } from './control.js';
import { FaultController } from './faults.js';
import { Reply } from './reply.js';
import type { Scenario } from './scenario.js';
import { SandboxState } from './state.js';
import { knownScopes, type MintOverrides, TokenAuthority } from './tokens.js';

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
  /** API requests answered at once (latency included) before text/plain 429s; default none. */
  concurrencyLimit: z.int().min(1).optional(),
  scenario: z.custom<Scenario>().optional(),
  /** One line at start and unexpected errors; never a secret. */
  logger: z.custom<Logger>().optional(),
});

export type SandboxOptions = z.input<typeof optionsSchema>;
export type SandboxSettings = z.output<typeof optionsSchema>;

export type Sandbox = Awaited<ReturnType<typeof startSandbox>>;

/** The variables that point a worker at this sandbox. */
export function sandboxApiEnv(sandbox: Pick<Sandbox, 'baseUrl' | 'clientId' | 'clientSecret'>) {
  const { baseUrl, clientId, clientSecret } = sandbox;
  return { PERKS_BASE_URL: baseUrl, PERKS_CLIENT_ID: clientId, PERKS_CLIENT_SECRET: clientSecret };
}

export async function startSandbox(options: SandboxOptions = {}) {
  const parsed = optionsSchema.safeParse(options);
  if (!parsed.success) throw new RangeError(`sandbox options: ${z.prettifyError(parsed.error)}`);
  const settings = parsed.data;
  const tokens = await TokenAuthority.create(settings.program, settings.tokenTtlSeconds);
  tokens.clients.set(settings.clientId, settings.clientSecret);
  const state = new SandboxState(settings.seed, settings.autoEnroll, tokens);
  const faults = new FaultController();
  const timers = new Set<NodeJS.Timeout>();

  const reset = () => {
    state.clear();
    faults.clear();
    for (let i = 1; i <= settings.consumers; i++) {
      const id = `sbx_${String(i).padStart(4, '0')}`;
      state.addConsumer(id, { rewards: settings.rewardsPerConsumer });
    }
    const { scenario } = settings;
    for (const c of scenario?.consumers ?? []) state.addConsumer(c.id, c);
    for (const fault of scenario?.faults ?? []) faults.inject(fault);
    // An option wins over the scenario's setting.
    state.setLatency(settings.latencyMs ?? scenario?.latencyMs ?? 0);
    state.setRateLimit(settings.rateLimitPerSecond ?? scenario?.rateLimitPerSecond);
    state.setConcurrencyLimit(settings.concurrencyLimit);
  };
  reset();
  const ctx = { ...settings, state, faults, tokens, reset };

  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://sandbox');
    const handled = url.pathname.startsWith('/_sandbox/')
      ? handleControl(ctx, url, new Reply(req, res, timers))
      : handleApi(ctx, url, new Reply(req, res, timers, state.settings.latencyMs, state.log));
    handled.catch((error: unknown) => {
      settings.logger?.error({ err: error, path: req.url }, 'sandbox request failed');
      if (res.headersSent || res.destroyed) return;
      res.writeHead(500, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ code: 'ERR-500-00', title: 'Internal Server Error', status: 500 }));
    });
  });
  server.keepAliveTimeout = 5_000;
  server.listen(settings.port, settings.host);
  await once(server, 'listening');
  const address = server.address() as AddressInfo;
  // Listening on every interface, it is reached on loopback: the URL clients are given.
  const reached = { '0.0.0.0': '127.0.0.1', '::': '::1' }[address.address] ?? address.address;
  const host = address.family === 'IPv6' ? `[${reached}]` : reached;
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
    mintToken: async (opts: MintOverrides & { scopes?: string[] } = {}): Promise<string> => {
      const minted = await state.mintToken('sandbox-control', opts.scopes ?? settings.scopes, opts);
      return minted.access_token;
    },
    close: async (): Promise<void> => {
      for (const timer of timers) clearTimeout(timer);
      timers.clear();
      await closeServer(server);
    },
  };
}
