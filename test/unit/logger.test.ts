import { Writable } from 'node:stream';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { redactedPaths } from '../../src/ops/logger.js';

function capture() {
  const lines: string[] = [];
  const stream = new Writable({
    write(chunk, _encoding, done) {
      lines.push(String(chunk));
      done();
    },
  });
  const logger = pino({ redact: { paths: redactedPaths, censor: '[redacted]' } }, stream);
  return { logger, lines };
}

describe('logger redaction', () => {
  it('removes authorization headers, client secrets and tokens wherever they sit', () => {
    const { logger, lines } = capture();
    logger.info({
      headers: { authorization: 'Bearer eyJhbGciOi.secret-token' },
      req: { headers: { authorization: 'Basic Y2xpOnNrX3NhbmRib3hfeA==' } },
      config: { perks: { clientSecret: 'sk_sandbox_leak1' } },
      clientSecret: 'sk_sandbox_leak2',
      token: { access_token: 'jwt-leak3' },
      access_token: 'jwt-leak4',
    });
    const out = lines.join('');
    for (const leak of ['secret-token', 'Y2xpOnNr', 'leak1', 'leak2', 'leak3', 'leak4']) {
      expect(out).not.toContain(leak);
    }
    expect(out).toContain('[redacted]');
  });
});
