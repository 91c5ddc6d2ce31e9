/**
 * The enqueueing of every job, and the typed producer API the client's Node services import
 * (`perks-worker/producer`). Payloads are validated before they reach Redis, and by the worker.
 */
import type { Job, Telemetry } from 'bullmq';
import type { Logger } from '../ops/logger.js';
import { type StartedReconciliation, startReconciliation } from '../reconciliation/index.js';
import { connected, createRedisConnection } from '../redis/connection.js';
import { deriveConsumerId } from './consumer-id.js';
import { enrollmentJobId, jobNames, syncJobId } from './names.js';
import {
  type EnrollmentPayload,
  type EnrollmentRequest,
  enrollmentRequestSchema,
  parsePayload,
  type RewardSyncBatchPayload,
  type RewardSyncPayload,
  rewardSyncBatchPayloadSchema,
  rewardSyncPayloadSchema,
} from './payloads.js';
import {
  closeQueues,
  defaultJobPolicy,
  type JobPolicy,
  openQueues,
  type Queues,
} from './queues.js';

/** Priority of the syncs a reconciliation fans out: after those of new enrollments. */
const reconciliationSyncPriority = 10;

export interface EnqueuedEnrollment {
  consumerId: string;
  jobId: string;
  /** True when an enrollment of this consumer was already pending: no second job was added. */
  alreadyPending: boolean;
}

/**
 * Enqueues enrollments in one round trip (every door's path), answered in the order given. While
 * one of a consumer is pending, another adds nothing and gets the pending job's id: deduplication
 * is atomic in Redis, so two racing producers cannot both believe they enqueued.
 */
export async function enqueueEnrollments(
  queues: Queues,
  payloads: readonly EnrollmentPayload[],
): Promise<EnqueuedEnrollment[]> {
  if (payloads.length === 0) return [];
  const jobs = payloads.map((data) => ({
    name: jobNames.enroll,
    data,
    opts: {
      jobId: enrollmentJobId(data.consumerId),
      deduplication: { id: `enroll-${data.consumerId}` },
    },
  }));
  const added = await queues.enrollment.addBulk(jobs);
  return jobs.map(({ data, opts }, i) => {
    const id = added[i]?.id ?? opts.jobId;
    return { consumerId: data.consumerId, jobId: id, alreadyPending: id !== opts.jobId };
  });
}

/** The producer API's enrollment: checks the request, derives the consumer id, enqueues it. */
export async function enqueueEnrollment(
  queues: Queues,
  request: EnrollmentRequest,
  consumerIdKey: string | undefined,
): Promise<EnqueuedEnrollment> {
  const { consumerId, ...rest } = parsePayload(enrollmentRequestSchema, request, 'enrollment');
  const derived = consumerId ?? deriveConsumerId(rest.userId ?? '', consumerIdKey);
  const [enqueued] = await enqueueEnrollments(queues, [{ ...rest, consumerId: derived }]);
  return enqueued as EnqueuedEnrollment;
}

/** Enqueues a reward sync; one arriving while one runs is kept to run after it (no change missed). */
export async function enqueueRewardSync(queues: Queues, payload: RewardSyncPayload): Promise<Job> {
  const { name, data, opts } = rewardSyncJob(payload);
  return queues.rewardSync.add(name, data, opts);
}

/**
 * Enqueues many syncs in one round trip, `consumersPerJob` to a job (the queue's own work per job
 * is much of the whole for consumers of a page or two). With `reconciliation` (its job id), each
 * job is a batch counted in its tally, its id the reconciliation's and its first consumer's:
 * enqueued again on a resume, it adds nothing.
 */
export async function enqueueRewardSyncs(
  queues: Queues,
  consumerIds: readonly string[],
  reason: RewardSyncPayload['reason'],
  options: { consumersPerJob?: number; reconciliation?: string } = {},
): Promise<void> {
  const { consumersPerJob = 1, reconciliation } = options;
  if (!Number.isInteger(consumersPerJob) || consumersPerJob < 1) {
    throw new RangeError(`consumersPerJob must be a whole number from 1, not ${consumersPerJob}`);
  }
  const jobs = [];
  for (let i = 0; i < consumerIds.length; i += consumersPerJob) {
    const ids = consumerIds.slice(i, i + consumersPerJob);
    const [only] = ids;
    jobs.push(
      ids.length === 1 && only !== undefined && reconciliation === undefined
        ? rewardSyncJob({ consumerId: only, reason })
        : rewardSyncBatchJob({ consumerIds: ids, reason, reconciliation }),
    );
  }
  await queues.rewardSync.addBulk(jobs);
}

/** A sync job, deduplicated per consumer; the payload is checked. */
export function rewardSyncJob(payload: RewardSyncPayload) {
  const data = parsePayload(rewardSyncPayloadSchema, payload, 'reward sync');
  const deduplication = { id: data.consumerId, keepLastIfActive: true };
  const jobId = syncJobId(data.consumerId);
  const opts = { jobId, deduplication, ...priorityOf(data.reason) };
  return { name: jobNames.syncRewards, data, opts };
}

function rewardSyncBatchJob(payload: RewardSyncBatchPayload) {
  const data = parsePayload(rewardSyncBatchPayloadSchema, payload, 'reward sync batch');
  const { reconciliation, consumerIds, reason } = data;
  const jobId = reconciliation && { jobId: `${reconciliation}-${consumerIds[0]}` };
  return { name: jobNames.syncRewardsBatch, data, opts: { ...priorityOf(reason), ...jobId } };
}

const priorityOf = (reason: RewardSyncPayload['reason']) =>
  reason === 'reconciliation' ? { priority: reconciliationSyncPriority } : {};

export { type StartedReconciliation, startReconciliation };

export interface ProducerOptions {
  /** REDIS_URL of the worker; with `clusterNodes`, only its user, password and TLS are used. */
  redisUrl: string;
  /** REDIS_CLUSTER_NODES of the worker: its Redis Cluster's seed nodes. Default: none. */
  clusterNodes?: readonly { host: string; port: number }[];
  /** QUEUE_PREFIX of the worker. Default `perks`. */
  queuePrefix?: string;
  /** PERKS_CONSUMER_ID_KEY of the worker; needed only for user ids that are not consumer ids. */
  consumerIdKey?: string;
  jobPolicy?: JobPolicy;
  logger?: Logger;
  /**
   * BullMQ telemetry, e.g. `new BullMQOtel({ tracerName: 'signup-service' })` (bullmq-otel): each
   * enqueue is a span of the active trace, which the worker's job span continues. Default: none.
   */
  telemetry?: Telemetry;
}

export type Producer = Awaited<ReturnType<typeof createProducer>>;

/** A fail-fast producer: rejects at once when Redis is unreachable rather than queueing in memory. */
export async function createProducer(options: ProducerOptions) {
  const { queuePrefix = 'perks', jobPolicy = defaultJobPolicy, logger, telemetry } = options;
  const target = { url: options.redisUrl, clusterNodes: options.clusterNodes };
  const connection = createRedisConnection(target, 'producer', logger);
  await connected(connection).catch((error: unknown) => {
    connection.disconnect();
    throw error;
  });
  const queues = openQueues(connection, queuePrefix, jobPolicy, logger, telemetry);
  return {
    queues,
    /** Its Redis connection, shared by the queues; closed by `close`. */
    connection,
    enqueueEnrollment: (request: EnrollmentRequest) =>
      enqueueEnrollment(queues, request, options.consumerIdKey),
    /**
     * `alreadyPending`: a sync of the consumer was waiting, and absorbed this one, or running,
     * and another follows it; either way no job was added.
     */
    async enqueueRewardSync(payload: RewardSyncPayload) {
      // A deduplicated add answers the pending job's id; its options keep the one asked for.
      const job = await enqueueRewardSync(queues, payload);
      return { jobId: job.id ?? '', alreadyPending: job.id !== job.opts.jobId };
    },
    startReconciliation: () => startReconciliation(queues),
    async close(): Promise<void> {
      await closeQueues(queues);
      connection.disconnect();
    },
  };
}
