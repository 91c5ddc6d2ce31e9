import { createRequire } from 'node:module';
import { type Logger, pino } from 'pino';
import type { LogConfig } from '../config.js';

export type { Logger };

/**
 * Paths whose values never reach a log line. Wildcards cover one level of nesting, so a
 * secret is also caught inside `err`, `req`, `config.perks` and the like.
 */
export const redactedPaths = [
  'authorization',
  'Authorization',
  'headers.authorization',
  'headers.Authorization',
  '*.headers.authorization',
  '*.headers.Authorization',
  'clientSecret',
  '*.clientSecret',
  '*.*.clientSecret',
  'client_secret',
  '*.client_secret',
  'accessToken',
  '*.accessToken',
  'access_token',
  '*.access_token',
  'token',
  '*.token',
  'password',
  '*.password',
];

/**
 * The process logger: JSON lines on stdout by default, pino-pretty when asked for. Pretty
 * printing runs in the same thread (no transport worker) so that nothing is lost when the
 * process exits right after logging. `destination` replaces stdout for JSON lines (tests).
 */
export function createLogger(
  config: LogConfig,
  bindings: Record<string, unknown> = {},
  destination?: NodeJS.WritableStream,
): Logger {
  const options = {
    level: config.level,
    base: { service: 'perks-worker', ...bindings },
    redact: { paths: redactedPaths, censor: '[redacted]' },
  };
  if (config.format === 'pretty') {
    // Loaded lazily: JSON logging must not pay for the pretty printer.
    return pino(options, prettyStream());
  }
  return destination ? pino(options, destination) : pino(options);
}

function prettyStream(): NodeJS.WritableStream {
  // pino-pretty is CommonJS; createRequire keeps this module synchronous.
  const require = createRequire(import.meta.url);
  const pretty = require('pino-pretty') as (opts: object) => NodeJS.WritableStream;
  return pretty({ colorize: process.stdout.isTTY, translateTime: 'SYS:HH:MM:ss.l', sync: true });
}
