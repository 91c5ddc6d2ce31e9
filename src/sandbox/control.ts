/**
 * The control API under /_sandbox/ (JSON, no auth): 400 {error} for an invalid body, 404 for an
 * unknown route, consumer, reward or client, 409 for an existing consumer. Reset keeps tokens
 * and API clients.
 */
import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import { decodeSegment, type ParsedBody, readBody, type SandboxContext } from './api.js';
import { faultSchema, validateFault } from './faults.js';
import type { Reply } from './reply.js';
import type { RewardJson } from './rewards.js';
import { consumerSchema, latencySchema } from './scenario.js';
import { SandboxLookupError } from './state.js';

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
  latencyMs: latencySchema,
  rateLimitPerSecond: z.number().positive().nullable().optional(),
});

function parse<T>(schema: z.ZodType<T>, body: ParsedBody): T {
  if (body.kind !== 'json') throw new RangeError('the body must be JSON');
  const result = schema.safeParse(body.value);
  if (!result.success) {
    const issue = result.error.issues[0];
    throw new RangeError(`${issue?.path.join('.') || 'body'}: ${issue?.message ?? 'invalid'}`);
  }
  return result.data;
}

export async function handleControl(ctx: SandboxContext, url: URL, reply: Reply): Promise<void> {
  const { state } = ctx;
  const method = reply.req.method ?? 'GET';
  const path = url.pathname.slice('/_sandbox/'.length);
  const segments = path.split('/').filter(Boolean).map(decodeSegment);
  const [resource, id, sub, rewardId] = segments;
  const key = `${method} ${resource ?? ''}${segments.length > 1 ? `/${segments.length}` : ''}`;
  const body = await readBody(reply.req);
  try {
    switch (key) {
      case 'GET health':
        return reply.json(200, { status: 'ok' });
      case 'GET consumers':
        return reply.json(200, state.listConsumers());
      case 'POST consumers': {
        const input = parse(consumerSchema, body);
        const { id, rewards = 0 } = input;
        state.addConsumer(id, input);
        return reply.json(201, { id, enrolled: state.isEnrolled(id), rewards });
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
        const updated = state.setRewardStatus(id, rewardId, input.status, input.consumer_status);
        return reply.json(200, updated);
      }
      case 'GET requests':
        return reply.json(200, { items: state.requestLog() });
      case 'GET counters':
        return reply.json(200, state.counters());
      case 'POST tokens': {
        const input = parse(mintBody, body.kind === 'empty' ? { kind: 'json', value: {} } : body);
        const minted = await state.mintToken('sandbox-control', input.scopes ?? ['PERKS'], input);
        return reply.json(200, minted);
      }
      case 'POST clients': {
        // As the administration console does it: the secret is shown once.
        const client = {
          client_id: `cli_${randomBytes(6).toString('hex')}`,
          client_secret: `sk_sandbox_${randomBytes(24).toString('hex')}`,
        };
        ctx.tokens.clients.set(client.client_id, client.client_secret);
        return reply.json(201, client);
      }
      case 'DELETE clients/2':
        if (!ctx.tokens.clients.delete(id ?? ''))
          throw new SandboxLookupError(404, `no client ${id}`);
        return reply.send(204, '');
      case 'POST tokens/2':
        if (id !== 'revoke') break;
        state.revokeTokens();
        return reply.send(204, '');
      case 'GET faults':
        return reply.json(200, ctx.faults.list());
      case 'POST faults': {
        // A list or one fault, parsed as such: an error names the field (kind: expected one of ...).
        const many = body.kind === 'json' && Array.isArray(body.value);
        const faults = many ? parse(z.array(faultSchema), body) : [parse(faultSchema, body)];
        // All checked before any is injected.
        for (const fault of faults) validateFault(fault);
        for (const fault of faults) ctx.faults.inject(fault);
        return reply.send(204, '');
      }
      case 'DELETE faults':
        ctx.faults.clear();
        return reply.send(204, '');
      case 'PUT settings': {
        const { latencyMs, rateLimitPerSecond: limit } = parse(settingsBody, body);
        if (latencyMs !== undefined) state.setLatency(latencyMs);
        if (limit !== undefined) state.setRateLimit(limit ?? undefined);
        return reply.json(200, state.settings);
      }
      case 'POST reset':
        ctx.reset();
        return reply.send(204, '');
    }
    reply.json(404, { error: `no control route ${method} /_sandbox/${segments.join('/')}` });
  } catch (error) {
    if (error instanceof RangeError) {
      reply.json(400, { error: error.message });
    } else if (error instanceof z.ZodError) {
      reply.json(400, { error: error.issues[0]?.message ?? 'invalid' });
    } else if (error instanceof SandboxLookupError) {
      reply.json(error.status, { error: error.message });
    } else {
      throw error;
    }
  }
}
