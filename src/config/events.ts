/** Which reward changes are recorded in the feed, and where they are delivered as webhooks. */
import { z } from 'zod';
import { rewardEventTypes } from '../store/types.js';
import { commaList, group, httpUrl, matches, variable, wholeNumber } from './define.js';

const eventType = z.enum(rewardEventTypes, {
  error: `must be \`none\` or a comma list of ${rewardEventTypes.join(', ')}`,
});
/** `none`, or a comma list of reward event types. */
const eventTypes = z
  .string()
  .transform((value) => (value === 'none' ? [] : commaList(value)))
  .pipe(z.array(eventType));
const whsec = matches(/^whsec_[A-Za-z0-9+/]{16,}={0,2}$/, 'must be whsec_ followed by base64');

export const eventsVariables = group('events', {
  EVENT_TYPES: variable('types', eventTypes, {
    default: rewardEventTypes.join(','),
    example: 'reward.status_changed,reward.missing',
    doc: 'Reward changes recorded in `reward_events` (and so delivered), a comma list, or `none`. Leave out `reward.created` for a first backfill of millions of rewards.',
  }),
  WEBHOOK_URL: variable('webhookUrl', httpUrl.optional(), {
    example: 'https://hooks.example.com/perks',
    doc: 'Where each reward event is POSTed, signed per Standard Webhooks (https, unless loopback). Needs `WEBHOOK_SECRET`. Unset: no delivery.',
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
    doc: 'An event still refused this long after it was recorded is marked failed (`perks-worker events --failed`), and the next one is delivered.',
  }),
  WEBHOOK_CONCURRENCY: variable('webhookConcurrency', wholeNumber(1, 1000), {
    default: '16',
    doc: "Consumers whose events one replica delivers at once; each consumer's events go one at a time, in feed order.",
  }),
});
