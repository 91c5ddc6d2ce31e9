/** The Perks API and consumer id variables (see define.ts). */
import { z } from 'zod';
import { group, httpUrl, matches, variable, wholeNumber } from './define.js';

/** The forms of a client id and secret (`sk_<env>_...`), for the variable and the file's content. */
const nonEmpty = z.string().min(1, { error: 'must not be empty' });
const clientSecretSchema = z
  .string()
  .regex(/^sk_[A-Za-z0-9]+_\S+$/, { error: 'must have the form sk_<env>_...' });
const allow = z.enum(['allow'], { error: 'must be allow, or unset' });

export const perksVariables = group('perks', {
  PERKS_BASE_URL: variable('baseUrl', httpUrl, {
    example: 'https://api.perks.example/programs/acme',
    doc: 'Base URL of the Perks API for your program (sandbox or production).',
  }),
  PERKS_INSECURE_HTTP: variable('insecureHttp', allow.optional(), {
    example: 'allow',
    doc: '`allow`: accept a plain `http://` `PERKS_BASE_URL` on a host that is not loopback (a sandbox on another host), with a warning at every start. Unset: such a URL is refused, since it would send the client secret in clear.',
  }),
  PERKS_CLIENT_ID: variable('clientId', nonEmpty.optional(), {
    example: 'cli_3f9a1c',
    doc: 'API client id from the administration console. Required, unless `PERKS_CLIENT_ID_FILE` is set.',
  }),
  PERKS_CLIENT_ID_FILE: variable('clientIdFile', z.string().min(1).optional(), {
    example: '/run/secrets/perks_client_id',
    doc: 'Path of a file holding the client id; read when `PERKS_CLIENT_ID` is unset. Given as files, id and secret are read again on SIGHUP and when the token endpoint refuses them: rotating them needs no restart.',
  }),
  PERKS_CLIENT_SECRET: variable('clientSecret', clientSecretSchema.optional(), {
    example: 'sk_<env>_<secret>',
    doc: 'API client secret (`sk_<env>_...`). Required, unless `PERKS_CLIENT_SECRET_FILE` is set.',
    secret: true,
  }),
  PERKS_CLIENT_SECRET_FILE: variable('clientSecretFile', z.string().min(1).optional(), {
    example: '/run/secrets/perks_client_secret',
    doc: 'Path of a file holding the client secret (Docker/Kubernetes secrets); read when `PERKS_CLIENT_SECRET` is unset.',
  }),
  PERKS_API_VERSION: variable('apiVersion', matches(/^\d+\.\d+\.\d+$/, 'must look like 2.0.0'), {
    default: '2.0.0',
    doc: 'Value of the mandatory `x-api-version` header.',
  }),
  PERKS_TIMEOUT_MS: variable('timeoutMs', wholeNumber(100, 600_000), {
    default: '10000',
    doc: 'Timeout of one HTTP request to the API, in milliseconds (100 to 600000).',
  }),
  PERKS_RETRY_ATTEMPTS: variable('retryAttempts', wholeNumber(1, 20), {
    default: '4',
    doc: 'Attempts of one idempotent API call on 500/502/503/504 and transport errors, inside a job (exponential backoff with jitter).',
  }),
  PERKS_RETRY_MAX_MS: variable('retryMaxMs', wholeNumber(0, 3_600_000), {
    default: '30000',
    doc: 'Upper bound on the time one API call spends retrying, in milliseconds.',
  }),
  PERKS_CONNECTIONS: variable('connections', wholeNumber(1, 1024), {
    default: '64',
    doc: 'Keep-alive connections to the API per process, and the most requests in flight at once. Below it the number adapts (`perks_worker_api_concurrency_limit`): it grows while answers keep their speed, and shrinks as they slow and on 429, 5xx and timeouts, so an unknown rate limit or a slow API is found, not configured.',
  }),
});

export const consumerIdVariables = group('consumerIds', {
  // Not refused when short (a worker that will not start is worse): work.ts warns.
  PERKS_CONSUMER_ID_KEY: variable('key', z.string().min(1).optional(), {
    example: 'a-long-random-string-of-32-chars',
    doc: 'HMAC key (at least 16 random characters; shorter ones are accepted with a warning) deriving consumer ids from user ids that are not valid consumer ids; required only then. **Never change it once used**: ids derived under another key are other consumers.',
    secret: true,
  }),
});
