/**
 * Enrollment: POST /perks/consumers with the consumer id the job carries (derived by its
 * producer), then a first reward sync. A 409 means an earlier attempt (perhaps one that timed
 * out after the API applied it) enrolled this consumer: success, recorded as 'already_enrolled'.
 */
import { ValidationError } from '../perks/errors.js';
import {
  enrollmentPayloadSchema,
  InvalidPayloadError,
  type PerksJob,
  parsePayload,
} from '../queues/payloads.js';
import { enqueueRewardSync } from '../queues/producer.js';
import type { JobContext } from './context.js';
import { steerFailure } from './failures.js';

export async function processEnrollment(
  job: PerksJob<'enroll'>,
  ctx: JobContext,
  signal?: AbortSignal,
) {
  let consumerId: string | undefined;
  let userId: string | undefined;
  try {
    const payload = parsePayload(enrollmentPayloadSchema, job.data, 'enrollment');
    ({ userId, consumerId } = payload);
    // One consumer a user: refused before the API creates a consumer no row could record.
    const recorded = userId === undefined ? undefined : await ctx.store.consumerOfUser(userId);
    if (recorded !== undefined && recorded !== consumerId) {
      throw new InvalidPayloadError(
        `invalid enrollment payload: userId ${JSON.stringify(userId)} is already the user of consumer ${recorded}, not ${consumerId} (did the producer's consumerId or PERKS_CONSUMER_ID_KEY change?)`,
      );
    }
    const { extraConsents = [], removedConsents = [] } = payload;
    const consents = { extraConsents, removedConsents };
    const enrollment = { id: consumerId, ...consents };
    const { outcome } = await ctx.client.enrollConsumer(enrollment, { signal });
    await ctx.store.recordEnrollment({ consumerId, userId, outcome, ...consents, at: new Date() });
    ctx.metrics.enrollment(outcome);
    await enqueueRewardSync(ctx.queues, { consumerId, reason: 'enrollment' });
    return { consumerId, outcome };
  } catch (error) {
    // Refused for good: say why where support will look for it.
    if (consumerId && error instanceof ValidationError) {
      const at = new Date();
      await ctx.store.recordConsumerError({ consumerId, userId, message: error.message, at });
    }
    return steerFailure(error, ctx);
  }
}
