/**
 * What each injected fault looks like on the wire. These mimic the two layers of the spec's
 * "Errors": the application (envelope) and the gateway, auth edge and throttling in front of
 * it (HTML pages, plain text, empty bodies, dropped connections).
 */
import type { ApiRoute, Fault } from './faults.js';
import type { Reply } from './reply.js';

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

/**
 * Answers with `fault`. Returns 'answered' when the fault replaced the response, or 'process'
 * when the request must still be handled (a delay that applies the write: the reply is held).
 */
export function applyFault(fault: Fault, route: ApiRoute, reply: Reply): 'answered' | 'process' {
  switch (fault.kind) {
    case 'status': {
      const status = fault.status ?? 500;
      reply.error(status, `ERR-${status}-00`);
      return 'answered';
    }
    case 'html502':
      reply.send(502, gatewayHtml, 'text/html');
      return 'answered';
    case 'throttle429': {
      const seconds = fault.retryAfterSeconds ?? 1;
      reply.send(429, 'Too Many Requests', 'text/plain', { 'retry-after': String(seconds) });
      return 'answered';
    }
    case 'empty401':
      reply.send(401, '');
      return 'answered';
    case 'empty':
      reply.send(fault.status ?? 503, '');
      return 'answered';
    case 'delay': {
      const delayMs = fault.delayMs ?? 0;
      if (fault.applyWrite === false) {
        // Nothing is processed; the gateway gives up after the delay.
        reply.send(504, '', undefined, {}, delayMs);
        return 'answered';
      }
      reply.holdMs = delayMs;
      return 'process';
    }
    case 'reset':
      reply.reset();
      return 'answered';
    case 'malformed': {
      const text = fault.body === 'wrong-shape' ? wrongShapes[route] : truncated;
      if (route === 'enroll') {
        // The enrollment is applied: only a successful answer's body is mangled.
        reply.successBodyOverride = { text, contentType: 'application/json' };
        return 'process';
      }
      reply.jsonText(200, text);
      return 'answered';
    }
  }
}
