/**
 * The sandbox control API: JSON over HTTP, no authentication, under /_sandbox/. It exists only
 * in the sandbox, for tests, benchmarks and demos driving it from another process.
 *
 *   GET    /_sandbox/health                                   {status:"ok"}
 *   GET    /_sandbox/consumers                                [{id, enrolled, rewards}]
 *   POST   /_sandbox/consumers          {id, enrolled?=true, rewards?=0}   201 {id, enrolled, rewards}
 *   GET    /_sandbox/consumers/{id}/rewards                   {items} (API JSON, insertion order)
 *   POST   /_sandbox/consumers/{id}/rewards  {count} | {items:[partial rewards]}  201 {items}
 *   PATCH  /_sandbox/consumers/{id}/rewards/{rid}  {status, consumer_status?}  200 reward
 *   DELETE /_sandbox/consumers/{id}/rewards/{rid}             204
 *   GET    /_sandbox/requests                                 {items: request log, oldest first}
 *   GET    /_sandbox/counters                                 {requests, tokensMinted, ...}
 *   POST   /_sandbox/tokens      {scopes?, program?, environment?, ttlSeconds?}  200 token
 *          (mints without credentials: tokens for another program or scope, for 403 tests)
 *   POST   /_sandbox/tokens/revoke                            204 (every current token dies)
 *   GET    /_sandbox/faults                                   [active faults with remaining]
 *   POST   /_sandbox/faults          fault | [faults]         204
 *   DELETE /_sandbox/faults                                   204
 *   PUT    /_sandbox/settings        {latencyMs?, rateLimitPerSecond?: number|null}  200 settings
 *   POST   /_sandbox/reset                                    204 (seeded data, no faults,
 *          counters and log emptied, settings as started; tokens stay valid)
 *
 * Errors: 400 {error} for an invalid body, 404 {error} for an unknown route, consumer or
 * reward, 409 {error} for a consumer that already exists.
 */
import { z } from 'zod';
import type { ParsedBody } from './api.js';
import { type FaultController, faultSchema, validateFault } from './faults.js';
import type { Reply } from './reply.js';
import type { RewardJson } from './rewards.js';
import { SandboxLookupError, type SandboxState } from './state.js';
import type { TokenAuthority } from './tokens.js';

export interface ControlContext {
  state: SandboxState;
  faults: FaultController;
  tokens: TokenAuthority;
  settings(): { latencyMs: number; rateLimitPerSecond: number | null };
  reset(): void;
}

const addConsumerBody = z.strictObject({
  id: z.string().min(1),
  enrolled: z.boolean().optional(),
  rewards: z.int().min(0).max(1_000_000).optional(),
});
const addRewardsBody = z.union([
  z.strictObject({ count: z.int().min(0).max(1_000_000) }),
  z.strictObject({ items: z.array(z.record(z.string(), z.unknown())) }),
]);
const statusBody = z.strictObject({
  status: z.string().min(1),
  consumer_status: z.string().min(1).optional(),
});
const mintBody = z.strictObject({
  scopes: z.array(z.string()).optional(),
  program: z.string().optional(),
  environment: z.string().optional(),
  ttlSeconds: z.int().min(1).max(86_400).optional(),
});
const settingsBody = z.strictObject({
  latencyMs: z.int().min(0).max(600_000).optional(),
  rateLimitPerSecond: z.number().positive().nullable().optional(),
});

class BadBody extends Error {}

function parse<T>(schema: z.ZodType<T>, body: ParsedBody): T {
  if (body.kind !== 'json') throw new BadBody('the body must be JSON');
  const result = schema.safeParse(body.value);
  if (!result.success) {
    const issue = result.error.issues[0];
    throw new BadBody(`${issue?.path.join('.') || 'body'}: ${issue?.message ?? 'invalid'}`);
  }
  return result.data;
}

export async function handleControl(
  ctx: ControlContext,
  method: string,
  segments: readonly string[],
  body: ParsedBody,
  reply: Reply,
): Promise<void> {
  try {
    await route(ctx, method, segments, body, reply);
  } catch (error) {
    if (error instanceof BadBody || error instanceof RangeError) {
      reply.json(400, { error: error.message });
    } else if (error instanceof z.ZodError) {
      reply.json(400, { error: error.issues[0]?.message ?? 'invalid' });
    } else if (error instanceof SandboxLookupError) {
      reply.json(error.reason === 'consumer-exists' ? 409 : 404, { error: error.message });
    } else {
      throw error;
    }
  }
}

async function route(
  ctx: ControlContext,
  method: string,
  segments: readonly string[],
  body: ParsedBody,
  reply: Reply,
): Promise<void> {
  const { state } = ctx;
  const [resource, id, sub, rewardId] = segments;
  const key = `${method} ${resource ?? ''}${segments.length > 1 ? `/${segments.length}` : ''}`;
  switch (key) {
    case 'GET health':
      return reply.json(200, { status: 'ok' });
    case 'GET consumers':
      return reply.json(200, state.listConsumers());
    case 'POST consumers': {
      const input = parse(addConsumerBody, body);
      state.addConsumer(input.id, input);
      return reply.json(201, {
        id: input.id,
        enrolled: state.isEnrolled(input.id),
        rewards: input.rewards ?? 0,
      });
    }
    case 'GET consumers/3':
    case 'POST consumers/3': {
      if (sub !== 'rewards' || id === undefined) break;
      if (method === 'GET') return reply.json(200, { items: state.rewardsOf(id) });
      const input = parse(addRewardsBody, body);
      const items =
        'count' in input
          ? state.addRewards(id, input.count)
          : state.addRewardItems(id, input.items as Partial<RewardJson>[]);
      return reply.json(201, { items });
    }
    case 'PATCH consumers/4':
    case 'DELETE consumers/4': {
      if (sub !== 'rewards' || id === undefined || rewardId === undefined) break;
      if (method === 'DELETE') {
        state.removeReward(id, rewardId);
        return reply.send(204, '');
      }
      const input = parse(statusBody, body);
      return reply.json(
        200,
        state.setRewardStatus(id, rewardId, input.status, input.consumer_status),
      );
    }
    case 'GET requests':
      return reply.json(200, { items: state.requestLog() });
    case 'GET counters':
      return reply.json(200, state.counters());
    case 'POST tokens': {
      const input = parse(mintBody, body.kind === 'empty' ? { kind: 'json', value: {} } : body);
      const minted = await ctx.tokens.mint('sandbox-control', input.scopes ?? ['PERKS'], input);
      state.countTokenMinted();
      return reply.json(200, minted);
    }
    case 'POST tokens/2':
      if (id !== 'revoke') break;
      state.revokeTokens();
      return reply.send(204, '');
    case 'GET faults':
      return reply.json(200, ctx.faults.list());
    case 'POST faults': {
      const input = parse(z.union([faultSchema, z.array(faultSchema)]), body);
      const faults = Array.isArray(input) ? input : [input];
      // Validate all before injecting any, so a bad list changes nothing.
      for (const fault of faults) validateFault(fault);
      for (const fault of faults) ctx.faults.inject(fault);
      return reply.send(204, '');
    }
    case 'DELETE faults':
      ctx.faults.clear();
      return reply.send(204, '');
    case 'PUT settings': {
      const input = parse(settingsBody, body);
      if (input.latencyMs !== undefined) state.setLatency(input.latencyMs);
      if (input.rateLimitPerSecond !== undefined) {
        state.setRateLimit(input.rateLimitPerSecond ?? undefined);
      }
      return reply.json(200, ctx.settings());
    }
    case 'POST reset':
      ctx.reset();
      return reply.send(204, '');
  }
  reply.json(404, { error: `no control route ${method} /_sandbox/${segments.join('/')}` });
}
