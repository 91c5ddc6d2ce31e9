/** The reconciliation queue's jobs: a reconciliation, and the cron's tick that starts one. */

import { type PerksJob, parsePayload, reconciliationPayloadSchema } from '../queues/payloads.js';
import { fanOut, type ReconciliationResult } from '../reconciliation/fan-out.js';
import { startReconciliation } from '../reconciliation/index.js';
import type { JobContext } from './context.js';

export async function processReconciliation(
  job: PerksJob<'reconcile'>,
  ctx: JobContext,
  signal?: AbortSignal,
): Promise<ReconciliationResult> {
  const state = parsePayload(reconciliationPayloadSchema, job.data, 'reconciliation');
  return fanOut(job, state, ctx, signal);
}

/** Starts a reconciliation unless one is already under way. */
export async function processReconcileTick(
  ctx: JobContext,
): Promise<{ started: boolean; jobId: string }> {
  const started = await startReconciliation(ctx.queues, 'schedule');
  ctx.logger.info(
    started,
    started.started
      ? 'scheduled reconciliation started'
      : 'reconciliation already running; tick skipped',
  );
  return started;
}
