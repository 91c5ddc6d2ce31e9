/** How signups reach `work` besides the Node producer: HTTP, the outbox table, RabbitMQ. */
import { z } from 'zod';
import { group, listenAddress, matches, serviceUrl, variable, wholeNumber } from './define.js';

const token = z.string().min(24, { error: 'must be at least 24 characters' });
const onOff = z.enum(['on', 'off'], { error: 'must be on or off' }).transform((v) => v === 'on');
const amqpUrl = serviceUrl(/^amqps?$/, 'must be an amqp:// or amqps:// URL');
const amqpQueue = matches(/^[A-Za-z0-9_.:-]{1,200}$/, 'must be 1 to 200 of A-Z a-z 0-9 _ . : -');

export const intakeVariables = group('intake', {
  INTAKE_TOKEN: variable('token', token.optional(), {
    example: 'a-long-random-string-of-32-chars',
    doc: 'Turns on the HTTP intake (`POST /v1/enrollments`, `/v1/syncs`): callers send `Authorization: Bearer <token>`. At least 24 characters. Unset: no HTTP intake.',
    secret: true,
  }),
  INTAKE_PORT: variable('port', wholeNumber(0, 65_535), {
    default: '9465',
    doc: 'Port of the HTTP intake, a server of its own, apart from the ops port.',
  }),
  INTAKE_HOST: variable('host', listenAddress, {
    default: '0.0.0.0',
    doc: 'IP address (or `localhost`) the HTTP intake listens on.',
  }),
  OUTBOX: variable('outbox', onOff, {
    default: 'on',
    example: 'off',
    doc: 'Drain the `signup_outbox` table (rows added by `enqueue_enrollment()` inside your own transactions) into enrollment jobs.',
  }),
  OUTBOX_POLL_MS: variable('outboxPollMs', wholeNumber(50, 60_000), {
    default: '1000',
    doc: 'How often the outbox is read when no notification arrived (LISTEN/NOTIFY wakes it sooner; behind PgBouncer polling alone serves).',
  }),
  OUTBOX_RETENTION_DAYS: variable('outboxRetentionDays', wholeNumber(0, 3650), {
    default: '7',
    doc: 'Processed outbox rows older than this are deleted.',
  }),
  INTAKE_AMQP_URL: variable('amqpUrl', amqpUrl.optional(), {
    example: 'amqp://guest:guest@127.0.0.1:5672',
    doc: 'Turns on the RabbitMQ intake: each message of `INTAKE_AMQP_QUEUE` is one enrollment. Unset: none.',
  }),
  INTAKE_AMQP_QUEUE: variable('amqpQueue', amqpQueue, {
    default: 'perks.signups',
    doc: 'Queue consumed (declared durable when missing, else used as declared); invalid messages go to `<queue>.dead` with the reason in `x-perks-error`.',
  }),
  INTAKE_AMQP_PREFETCH: variable('amqpPrefetch', wholeNumber(1, 10_000), {
    default: '100',
    doc: 'Unacknowledged messages the worker holds at once.',
  }),
});
