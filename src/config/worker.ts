/**
 * What every job carries, whoever enqueues it (so `enroll` and the other producers read it too);
 * how `work` runs the jobs and serves its operations endpoints; and logging (see define.ts).
 */
import { CronExpressionParser } from 'cron-parser';
import { z } from 'zod';
import { maxConsumersPerSyncJob } from '../queues/names.js';
import { group, httpUrl, listenAddress, matches, variable, wholeNumber } from './define.js';

/** Read by BullMQ's own parser, in UTC: a value out of range is refused here, not at `work`. */
const cron = matches(
  /^(off|(\S+\s+){4,5}\S+)$/,
  'must be a cron expression of 5 or 6 fields, or off',
).superRefine((value, ctx) => {
  if (value === 'off') return;
  try {
    CronExpressionParser.parse(value, { tz: 'UTC' });
  } catch (error) {
    const message = `must be a cron expression of 5 or 6 fields, or off: ${(error as Error).message}`;
    ctx.addIssue({ code: 'custom', message });
  }
});
const userName = matches(/^[^:\s]{1,64}$/, 'must be 1 to 64 characters, no colon or space');
const password = z
  .string()
  .min(12, { error: 'must be at least 12 characters' })
  .max(256, { error: 'must be at most 256 characters' });
const serviceName = z.string().max(255, { error: 'must be at most 255 characters' });
const logLevel = z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']);

export const jobVariables = group('jobs', {
  JOB_ATTEMPTS: variable('jobAttempts', wholeNumber(1, 100), {
    default: '8',
    doc: 'Attempts of a job before it is failed (exponential backoff between them). Like the three below, a job carries the value of the process that enqueued it: `work`, or `enroll`, `sync`, `reconcile`.',
  }),
  JOB_BACKOFF_MS: variable('jobBackoffMs', wholeNumber(0, 3_600_000), {
    default: '5000',
    doc: 'First delay of the exponential backoff between job attempts, in milliseconds.',
  }),
  KEEP_COMPLETED_JOBS: variable('keepCompletedJobs', wholeNumber(0, 1_000_000), {
    default: '1000',
    doc: 'Completed jobs kept per queue for inspection (the oldest are removed).',
  }),
  KEEP_FAILED_JOBS: variable('keepFailedJobs', wholeNumber(0, 1_000_000), {
    default: '10000',
    doc: 'Failed jobs kept per queue for inspection and `failed --retry`.',
  }),
});

export const workerVariables = group('worker', {
  PERKS_RATE_LIMIT_PER_SECOND: variable('rateLimitPerSecond', wholeNumber(1, 100_000).optional(), {
    example: '50',
    doc: 'Global cap on jobs started per second per queue, across all replicas (BullMQ limiter). A sync job makes one request per 1000 rewards. Unset: no cap.',
  }),
  PERKS_RECONCILE_CRON: variable('reconcileCron', cron, {
    default: '0 3 * * *',
    doc: 'When the reconciliation re-syncs every enrolled consumer (cron, UTC); `off`: no schedule (one already registered is removed).',
  }),
  ENROLL_CONCURRENCY: variable('enrollConcurrency', wholeNumber(1, 1000), {
    default: '32',
    doc: 'Enrollment jobs processed at once by one replica. Each waits on one API request at a time, and the requests in flight stay within what the API answers at speed (`PERKS_CONNECTIONS`): 32 keep a 20 ms API from bounding enrollment.',
  }),
  SYNC_CONCURRENCY: variable('syncConcurrency', wholeNumber(1, 1000), {
    default: '16',
    doc: 'Reward sync jobs processed at once by one replica. By default their syncs (16 × `SYNC_CONSUMERS_PER_JOB`) outnumber the requests `PERKS_CONNECTIONS` lets out (64): while some write their page, others keep the requests in flight.',
  }),
  SYNC_CONSUMERS_PER_JOB: variable('syncConsumersPerJob', wholeNumber(1, maxConsumersPerSyncJob), {
    default: '8',
    doc: 'Consumers per sync job of a reconciliation, synced at once by that job; each keeps its own retries. `1` while `PERKS_RATE_LIMIT_PER_SECOND` is set, so that the cap counts syncs.',
  }),
  RECONCILE_BATCH_SIZE: variable('reconcileBatchSize', wholeNumber(1, 10_000), {
    default: '500',
    doc: 'Consumers read (keyset) and enqueued per batch by a reconciliation.',
  }),
  RECONCILE_MAX_PENDING: variable('reconcileMaxPending', wholeNumber(1, 1_000_000), {
    default: '2000',
    doc: 'A reconciliation waits while more sync jobs than this are pending, so Redis holds a bounded number of jobs.',
  }),
  JOB_LOCK_MS: variable('jobLockMs', wholeNumber(1000, 3_600_000), {
    default: '30000',
    doc: "How long a replica's hold on a running job lasts without renewal: the jobs of a replica that died are taken up by another after about this long.",
  }),
  SHUTDOWN_TIMEOUT_MS: variable('shutdownTimeoutMs', wholeNumber(0, 3_600_000), {
    default: '30000',
    doc: 'On SIGTERM/SIGINT, how long active jobs may run to completion before the process exits anyway (they are then retried elsewhere).',
  }),
  PORT: variable('port', wholeNumber(0, 65_535), {
    default: '9464',
    doc: 'Port of the operations HTTP server of `work` (`/healthz`, `/readyz`, `/metrics`, `/dashboard`).',
  }),
  OPS_HOST: variable('opsHost', listenAddress, {
    default: '0.0.0.0',
    example: '127.0.0.1',
    doc: 'Address the operations server of `work` listens on. `0.0.0.0` (all interfaces, as exporters do); `127.0.0.1` keeps it on the host.',
  }),
  DASHBOARD_USER: variable('dashboardUser', userName, {
    default: 'admin',
    doc: 'User name of the queue dashboard (`/dashboard`, HTTP basic auth).',
  }),
  DASHBOARD_PASSWORD: variable('dashboardPassword', password.optional(), {
    example: 'a-long-dashboard-password',
    doc: 'Password of the queue dashboard (at least 12 characters). Unset: no dashboard, `/dashboard` answers 404.',
    secret: true,
  }),
  OTEL_EXPORTER_OTLP_ENDPOINT: variable('otlpEndpoint', httpUrl.optional(), {
    example: 'http://127.0.0.1:4318',
    doc: 'OpenTelemetry collector (OTLP over HTTP) receiving traces at `<endpoint>/v1/traces`: a span per job attempt, with its Perks API calls and PostgreSQL queries inside, continuing the trace of the producer or intake request that enqueued it. Unset: no tracing, nothing loaded.',
  }),
  OTEL_SERVICE_NAME: variable('otelServiceName', serviceName, {
    default: 'perks-worker',
    doc: 'The `service.name` of the traces (with `OTEL_EXPORTER_OTLP_ENDPOINT`), e.g. to tell environments apart.',
  }),
});

export const logVariables = group('log', {
  LOG_LEVEL: variable('level', logLevel, {
    default: 'info',
    doc: '`fatal`, `error`, `warn`, `info`, `debug`, `trace` or `silent`.',
  }),
  LOG_FORMAT: variable('format', z.enum(['json', 'pretty']), {
    default: 'json',
    doc: '`json` (one object a line, for log shippers) or `pretty` (for humans).',
  }),
});
