/** Which reward changes are recorded in the feed, and where they are delivered as webhooks. */
import { z } from 'zod';
import { rewardEventTypes } from '../store/types.js';
import { httpUrl, variable, wholeNumber } from './define.js';

export const eventsVariables = {
  EVENT_TYPES: variable({
    group: 'events',
    key: 'types',
    schema: z
      .string()
      .transform((value) =>
        value === 'none'
          ? []
          : value
              .split(',')
              .map((type) => type.trim())
              .filter(Boolean),
      )
      .pipe(
        z.array(
          z.enum(rewardEventTypes, {
            error: `must be \`none\` or a comma list of ${rewardEventTypes.join(', ')}`,
          }),
        ),
      ),
    default: rewardEventTypes.join(','),
    example: 'reward.status_changed,reward.missing',
    description:
      'Reward changes recorded in `reward_events` (and so delivered), a comma list, or `none`. Leave out `reward.created` for a first backfill of millions of rewards.',
  }),
  WEBHOOK_URL: variable({
    group: 'events',
    key: 'webhookUrl',
    schema: httpUrl.optional(),
    example: 'https://hooks.example.com/perks',
    description:
      'Where each reward event is POSTed, signed per Standard Webhooks (https, unless loopback). Needs `WEBHOOK_SECRET`. Unset: no delivery.',
  }),
  WEBHOOK_SECRET: variable({
    group: 'events',
    key: 'webhookSecret',
    schema: z
      .string()
      .regex(/^whsec_[A-Za-z0-9+/]{16,}={0,2}$/, { error: 'must be whsec_ followed by base64' })
      .optional(),
    example: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
    description:
      'The signing secret shared with the receiver: `whsec_` + base64 (Standard Webhooks).',
    secret: true,
  }),
  WEBHOOK_TIMEOUT_MS: variable({
    group: 'events',
    key: 'webhookTimeoutMs',
    schema: wholeNumber(100, 300_000),
    default: '10000',
    description: 'A delivery with no answer by then is retried.',
  }),
  WEBHOOK_MAX_AGE_HOURS: variable({
    group: 'events',
    key: 'webhookMaxAgeHours',
    schema: wholeNumber(1, 24 * 365),
    default: '72',
    description:
      'An event still refused this long after it was recorded is marked failed (`perks-worker events --failed`), and the next one is delivered.',
  }),
  WEBHOOK_CONCURRENCY: variable({
    group: 'events',
    key: 'webhookConcurrency',
    schema: wholeNumber(1, 1000),
    default: '16',
    description:
      "Consumers whose events one replica delivers at once; each consumer's events go one at a time, in feed order.",
  }),
} as const;
