import { createRequire } from 'node:module';
import { type Logger, pino } from 'pino';
import type { LogConfig } from '../config.js';

export type { Logger };

const secretKeys = [
  'authorization',
  'Authorization',
  'clientSecret',
  'client_secret',
  'accessToken',
  'access_token',
  'token',
  'password',
];

/** Paths whose values never reach a log line, also two levels down (`req.headers`, `config.perks`). */
export const redactedPaths = secretKeys.flatMap((key) => [key, `*.${key}`, `*.*.${key}`]);

/** JSON lines on stdout (or `destination`), or pino-pretty in this thread: none lost at exit. */
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
  if (config.format === 'pretty') return pino(options, prettyStream());
  return destination ? pino(options, destination) : pino(options);
}

/** Loaded only when asked for; pino-pretty is CommonJS, required to keep this synchronous. */
function prettyStream(): NodeJS.WritableStream {
  const require = createRequire(import.meta.url);
  const pretty = require('pino-pretty') as (opts: object) => NodeJS.WritableStream;
  return pretty({ colorize: process.stdout.isTTY, translateTime: 'SYS:HH:MM:ss.l', sync: true });
}
