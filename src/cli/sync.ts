import { UsageError } from '../errors.js';
import { consumerIdSchema } from '../perks/schemas.js';
import { withProducer } from './producer-session.js';

export async function run(consumerId: string): Promise<number> {
  if (!consumerIdSchema.safeParse(consumerId).success) {
    throw new UsageError(
      `sync: <consumer-id> ${JSON.stringify(consumerId.slice(0, 120))} is not a consumer id (2 to 100 of a-z A-Z 0-9 _ -)`,
    );
  }
  const { jobId, alreadyPending } = await withProducer((producer) =>
    producer.enqueueRewardSync({ consumerId, reason: 'manual' }),
  );
  process.stdout.write(
    alreadyPending
      ? `reward sync of consumer ${consumerId} already waiting or running (job ${jobId}): not enqueued again (a running one is followed by another)\n`
      : `enqueued reward sync of consumer ${consumerId} (job ${jobId})\n`,
  );
  return 0;
}
