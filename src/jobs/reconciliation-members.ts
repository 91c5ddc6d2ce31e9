/**
 * A reconciliation's consumer whose sync is left to a job of its own (one already pending, or
 * the job a failed consumer is handed to) must still be counted in that reconciliation's
 * tally: that job has to carry the reconciliation's id. An own job is deduplicated per
 * consumer, so the job that will run may be an older one, added without it.
 */
import type { Queue } from 'bullmq';
import type { TallyStore } from '../queues/reconciliation-tally.js';
import { countOutcome } from '../queues/reconciliation-tally.js';

/**
 * Makes the pending own job of each of `consumerIds` carry `reconciliation`. A running job
 * needs nothing: the add that met it was kept as its next run, with the id. A job already
 * carrying another reconciliation keeps it; ours then counts the consumer as synced now, as it
 * has no other way to learn the outcome.
 */
export async function carryReconciliation(
  queue: Queue,
  tallies: TallyStore,
  consumerIds: readonly string[],
  reconciliation: string,
): Promise<void> {
  let unknowable = 0;
  for (const consumerId of consumerIds) {
    const jobId = await queue.getDeduplicationJobId(consumerId);
    const job = jobId ? await queue.getJob(jobId) : undefined;
    if (!job) continue; // ended meanwhile: its outcome is counted or the add ran it anew
    const carried = (job.data as { reconciliation?: unknown }).reconciliation;
    if (carried === reconciliation || (await job.getState()) === 'active') continue;
    if (carried === undefined) await job.updateData({ ...job.data, reconciliation });
    else unknowable += 1;
  }
  await countOutcome(tallies, reconciliation, 'synced', unknowable);
}
