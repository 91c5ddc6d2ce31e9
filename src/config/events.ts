/** Which reward changes are recorded in the feed, and where they are delivered as webhooks. */
import { z } from 'zod';
import { rewardEventTypes } from '../store/types.js';
import { commaList, group, httpUrlAsIs, matches, variable, wholeNumber } from './define.js';

const eventType = z.enum(rewardEventTypes, {
  error: `must be \`none\` or a comma list of ${rewardEventTypes.join(', ')}`,
});
/** `none`, or a comma list of reward event types. */
const eventTypes = z
  .string()
  .transform((value) => (value === 'none' ? [] : commaList(value)))
  .pipe(z.array(eventType));
/** Whole days, or `off` (undefined): events kept for ever. */
const retentionDays = z.union([z.literal('off').transform(() => undefined), wholeNumber(1, 3650)], {
  error: 'must be a whole number of days from 1 to 3650, or off',
});
// Canonical base64 (padded, whole): Python's and Go's decoders refuse what Node's would accept.
const whsec = matches(
  /^whsec_[A-Za-z0-9+/]{16,}={0,2}$/,
  'must be whsec_ followed by base64',
).refine(
  (value) => {
    const body = value.slice('whsec_'.length);
    return Buffer.from(body, 'base64').toString('base64') === body;
  },
  { error: 'must be whsec_ followed by padded base64 (a multiple of 4 characters)' },
);

export const eventsVariables = group('events', {
  EVENT_TYPES: variable('types', eventTypes, {
    default: rewardEventTypes.join(','),
    example: 'reward.status_changed,reward.missing',
    doc: 'Reward changes recorded in `reward_events` (and so delivered), a comma list, or `none`. Leave out `reward.created` to send no webhook per reward of a first backfill.',
  }),
  EVENT_RETENTION_DAYS: variable('retentionDays', retentionDays, {
    default: '30',
    doc: 'Events recorded longer ago than this are deleted (`work` prunes within a minute of its start, then hourly, once for all replicas), with their delivery failures; with webhooks on, never one not yet delivered or given up. `off`: kept for ever.',
  }),
  WEBHOOK_URL: variable('webhookUrl', httpUrlAsIs.optional(), {
    example: 'https://hooks.example.com/perks',
    doc: 'Where each reward event is POSTed, as given (a trailing slash is kept), signed per Standard Webhooks (https, unless loopback); `user:password@` in it is sent as HTTP Basic. Needs `WEBHOOK_SECRET`. Unset: no delivery.',
  }),
  WEBHOOK_SECRET: variable('webhookSecret', whsec.optional(), {
    example: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
    doc: 'The signing secret shared with the receiver: `whsec_` + base64 (Standard Webhooks).',
    secret: true,
  }),
  WEBHOOK_TIMEOUT_MS: variable('webhookTimeoutMs', wholeNumber(100, 300_000), {
    default: '10000',
    doc: 'A delivery with no answer by then is retried.',
  }),
  WEBHOOK_MAX_AGE_HOURS: variable('webhookMaxAgeHours', wholeNumber(1, 24 * 365), {
    default: '72',
    doc: 'An event still refused this long after it was recorded, or after the refusals began if later (a replay, a long stop), is marked failed (`perks-worker events --failed`), and the next one is delivered.',
  }),
  WEBHOOK_CONCURRENCY: variable('webhookConcurrency', wholeNumber(1, 1000), {
    default: '16',
    doc: "Consumers whose events one replica delivers at once; each consumer's events go one at a time, in feed order.",
  }),
});
