/** Injected failures: the next `count` responses of a route become what a gateway can send. */
import { z } from 'zod';
import type { Reply } from './reply.js';

export const faultSchema = z.strictObject({
  route: z.enum(['token', 'enroll', 'listRewards', 'getReward', '*']),
  /** Only requests about this consumer (path, or enrollment body). */
  consumerId: z.string().min(1).optional(),
  count: z.int().min(1).max(1_000_000),
  /**
   * delay: waits `delayMs`, the request processed at once unless applyWrite is false (a bare
   * 504); malformed: a 200 of truncated JSON or (`body: 'wrong-shape'`) the wrong shape. Each
   * kind has an example in docs/commands.md (a test posts them).
   */
  kind: z.enum([
    'status',
    'html502',
    'throttle429',
    'empty401',
    'empty',
    'delay',
    'reset',
    'malformed',
  ]),
  status: z.int().min(400).max(599).optional(),
  retryAfterSeconds: z.int().min(0).max(86_400).optional(),
  delayMs: z.int().min(0).max(600_000).optional(),
  applyWrite: z.boolean().optional(),
  body: z.enum(['not-json', 'wrong-shape']).optional(),
});

export type Fault = z.infer<typeof faultSchema>;
export type ApiRoute = Exclude<Fault['route'], '*'>;
type ActiveFault = Fault & { remaining: number };

export function validateFault(fault: Fault): Fault {
  const parsed = faultSchema.parse(fault);
  // 403: one resource refused (with `consumerId`), the credentials otherwise fine.
  if (parsed.kind === 'status' && ![403, 500, 502, 503, 504].includes(parsed.status ?? 0)) {
    throw new RangeError('a status fault needs status 403, 500, 502, 503 or 504');
  }
  if (parsed.kind === 'empty' && parsed.status !== undefined && parsed.status < 500) {
    throw new RangeError('an empty fault needs a 5xx status (503 or 504)');
  }
  if (parsed.kind === 'delay' && parsed.delayMs === undefined) {
    throw new RangeError('a delay fault needs delayMs');
  }
  return parsed;
}

export class FaultController {
  private active: ActiveFault[] = [];

  /** Faults are consumed in the order they were injected. */
  inject(fault: Fault): void {
    const valid = validateFault(fault);
    this.active.push({ ...valid, remaining: valid.count });
  }

  clear(): void {
    this.active = [];
  }

  list(): ActiveFault[] {
    return this.active.map((f) => ({ ...f }));
  }

  /** Spends one of the matching fault's count; one consumer's never fires for the token call. */
  take(route: ApiRoute, consumerId: string | undefined): Fault | undefined {
    const index = this.active.findIndex(
      (f) => (f.route === '*' || f.route === route) && (f.consumerId ?? consumerId) === consumerId,
    );
    const fault = this.active[index];
    if (!fault) return undefined;
    if (--fault.remaining <= 0) this.active.splice(index, 1);
    return fault;
  }
}

const gatewayHtml = `<!DOCTYPE html>
<html><head><title>502 Bad Gateway</title></head>
<body><center><h1>502 Bad Gateway</h1></center><hr><center>perks-gateway</center></body></html>
`;

/** Bodies a robust client must reject: 200 OK, yet not the resource it asked for. */
const wrongShapes: Record<ApiRoute, string> = {
  token: '{"token":"","expires":"soon"}',
  enroll: '{"consumer":{"ok":true}}',
  listRewards: '{"items":{"0":null},"meta":"page 1"}',
  getReward: '{"id":42,"amount":12.5}',
};

const truncated = '{"items": [ {"id": "trunc';

/** Each kind's answer; a held `delay` or a `malformed` enrollment still lets the API handle it. */
const answers: Record<Fault['kind'], (f: Fault, r: Reply, route: ApiRoute) => void> = {
  status: (f, r) => r.error(f.status ?? 500, `ERR-${f.status ?? 500}-00`),
  html502: (_, r) => r.send(502, gatewayHtml, 'text/html'),
  throttle429: (f, r) =>
    r.send(429, 'Too Many Requests', 'text/plain', {
      'retry-after': String(f.retryAfterSeconds ?? 1),
    }),
  empty401: (_, r) => r.send(401, ''),
  empty: (f, r) => r.send(f.status ?? 503, ''),
  reset: (_, r) => r.reset(),
  delay: (f, r) => {
    r.holdMs = f.delayMs ?? 0;
    if (f.applyWrite === false) r.send(504, '');
  },
  malformed: (f, r, route) => {
    const text = f.body === 'wrong-shape' ? wrongShapes[route] : truncated;
    if (route === 'enroll') r.successBodyOverride = text;
    else r.send(200, text, 'application/json');
  },
};

/** True when the fault answered the request. */
export function applyFault(fault: Fault, route: ApiRoute, reply: Reply): boolean {
  answers[fault.kind](fault, reply, route);
  return reply.done;
}
