/** The Perks API and consumer id variables (see define.ts). */
import { z } from 'zod';
import { httpUrl, variable, wholeNumber } from './define.js';

/** The form of a client secret (`sk_<env>_...`), for the variable and for the file's content. */
export const clientSecretSchema = z
  .string()
  .regex(/^sk_[A-Za-z0-9]+_\S+$/, { error: 'must have the form sk_<env>_...' });

export const apiVariables = {
  PERKS_BASE_URL: variable({
    group: 'perks',
    key: 'baseUrl',
    schema: httpUrl,
    example: 'https://api.perks.example/programs/acme',
    description: 'Base URL of the Perks API for your program (sandbox or production).',
  }),
  PERKS_INSECURE_HTTP: variable({
    group: 'perks',
    key: 'insecureHttp',
    schema: z.enum(['allow'], { error: 'must be allow, or unset' }).optional(),
    example: 'allow',
    description:
      '`allow`: accept a plain `http://` `PERKS_BASE_URL` on a host that is not loopback (a sandbox on another host), with a warning at every start. Unset: such a URL is refused, since it would send the client secret in clear.',
  }),
  PERKS_CLIENT_ID: variable({
    group: 'perks',
    key: 'clientId',
    schema: z.string().min(1),
    example: 'cli_3f9a1c',
    description: 'API client id from the administration console.',
  }),
  PERKS_CLIENT_SECRET: variable({
    group: 'perks',
    key: 'clientSecret',
    schema: clientSecretSchema.optional(),
    example: 'sk_sandbox_xxxxxxxx',
    description:
      'API client secret (`sk_<env>_...`). Required, unless `PERKS_CLIENT_SECRET_FILE` is set.',
    secret: true,
  }),
  PERKS_CLIENT_SECRET_FILE: variable({
    group: 'perks',
    key: 'clientSecretFile',
    schema: z.string().min(1).optional(),
    example: '/run/secrets/perks_client_secret',
    description:
      'Path of a file holding the client secret (Docker/Kubernetes secrets); read when `PERKS_CLIENT_SECRET` is unset.',
  }),
  PERKS_API_VERSION: variable({
    group: 'perks',
    key: 'apiVersion',
    schema: z.string().regex(/^\d+\.\d+\.\d+$/, { error: 'must look like 2.0.0' }),
    default: '2.0.0',
    description: 'Value of the mandatory `x-api-version` header.',
  }),
  PERKS_TIMEOUT_MS: variable({
    group: 'perks',
    key: 'timeoutMs',
    schema: wholeNumber(100, 600_000),
    default: '10000',
    description: 'Timeout of one HTTP request to the API, in milliseconds (100 to 600000).',
  }),
  PERKS_RETRY_ATTEMPTS: variable({
    group: 'perks',
    key: 'retryAttempts',
    schema: wholeNumber(1, 20),
    default: '4',
    description:
      'Attempts of one idempotent API call on 500/502/503/504 and transport errors, inside a job (exponential backoff with jitter).',
  }),
  PERKS_RETRY_MAX_MS: variable({
    group: 'perks',
    key: 'retryMaxMs',
    schema: wholeNumber(0, 3_600_000),
    default: '30000',
    description: 'Upper bound on the time one API call spends retrying, in milliseconds.',
  }),
  PERKS_CONNECTIONS: variable({
    group: 'perks',
    key: 'connections',
    schema: wholeNumber(1, 1024),
    default: '32',
    description:
      'Keep-alive connections to the API per process: at most this many requests at once. At least `ENROLL_CONCURRENCY` + `SYNC_CONCURRENCY` lets no job wait for a connection; fewer caps the API concurrency.',
  }),
  PERKS_CONSUMER_ID_KEY: variable({
    group: 'consumerIds',
    key: 'key',
    // Not refused when short (a worker that will not start is worse): work.ts warns.
    schema: z.string().min(1).optional(),
    example: 'a-long-random-string-of-32-chars',
    description:
      'HMAC key (at least 16 random characters; shorter ones are accepted with a warning) deriving consumer ids from user ids that are not valid consumer ids; required only then. **Never change it once used**: ids derived under another key are other consumers.',
    secret: true,
  }),
} as const;
