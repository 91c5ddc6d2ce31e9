/**
 * The typed producer API: what the client's own Node services import to feed the worker.
 *
 *   const perks = await createProducer({ redisUrl, consumerIdKey });
 *   await perks.enqueueEnrollment({ userId: 'customer-8812', extraConsents: ['TARGETING'] });
 *
 * Payloads are validated here, before anything reaches Redis, and again by the worker.
 */
import type { Job, Telemetry } from 'bullmq';
import type { Logger } from '../ops/logger.js';
import { type StartedReconciliation, startReconciliation } from '../reconciliation/index.js';
import { connected, createRedisConnection, type RedisClient } from './connection.js';
import { deriveConsumerId } from './consumer-id.js';
import { enrollmentDeduplicationId, enrollmentJobId, jobNames } from './names.js';
import {
  type EnrollmentPayload,
  enrollmentPayloadSchema,
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
 * Enqueues an enrollment. While one of this consumer is pending (waiting, delayed, running),
 * a duplicate signup event adds nothing and is told so: BullMQ's deduplication does it
 * atomically in Redis, so two producers racing cannot both believe they enqueued. Once that
 * job has finished, a new request is a new enrollment attempt.
 */
export async function enqueueEnrollment(
  queues: Queues,
  payload: EnrollmentPayload,
  consumerIdKey: string | undefined,
): Promise<EnqueuedEnrollment> {
  const valid = parsePayload(enrollmentPayloadSchema, payload, 'enrollment');
  const { name, data, opts } = enrollmentJob(enrollmentConsumerId(valid, consumerIdKey), valid);
  return enqueuedAs(data.consumerId, opts.jobId, await queues.enrollment.add(name, data, opts));
}

/** The consumer id of a valid enrollment payload: its own, or derived from its user id. */
export function enrollmentConsumerId(
  valid: EnrollmentPayload,
  consumerIdKey: string | undefined,
): string {
  return valid.consumerId ?? deriveConsumerId(valid.userId ?? '', consumerIdKey);
}

/** The enrollment job of a valid payload: its id, and its deduplication on the consumer. */
export function enrollmentJob(consumerId: string, valid: EnrollmentPayload) {
  return {
    name: jobNames.enroll,
    data: { ...valid, consumerId },
    opts: {
      jobId: enrollmentJobId(consumerId),
      deduplication: { id: enrollmentDeduplicationId(consumerId) },
    },
  };
}

/** What an add of `enrollmentJob` did: a deduplicated add answers with the pending job's id. */
export function enqueuedAs(consumerId: string, jobId: string, job: Job): EnqueuedEnrollment {
  return { consumerId, jobId: job.id ?? jobId, alreadyPending: job.id !== jobId };
}

/**
 * Enqueues a reward sync. At most one sync per consumer runs at a time; a request arriving
 * while one runs is kept and runs after it (`keepLastIfActive`), so no change is missed.
 */
export async function enqueueRewardSync(queues: Queues, payload: RewardSyncPayload): Promise<Job> {
  const { name, data, opts } = rewardSyncJob(payload);
  return queues.rewardSync.add(name, data, opts);
}

/**
 * Enqueues many syncs in one round trip (the reconciliation's fan-out), `consumersPerJob`
 * consumers to a job. A job of several consumers syncs them at once, and costs the queue one
 * job instead of several: the consumers of a large fan-out mostly have a page or two, and the
 * queue's own work per job is then much of the whole.
 *
 * What a job of one consumer gives, such a job gives each of its consumers
 * (jobs/sync-rewards-batch.ts): a consumer that fails is retried in its own job, with the
 * usual attempts, and shows in `perks-worker failed` if it fails for good; a consumer with a
 * sync job of its own is left to it. BullMQ's deduplication is per job, so it does not apply
 * to the job itself.
 *
 * With `reconciliation` (its job id), every job is one of several consumers (even of one), its
 * outcomes go to that reconciliation's tally, and its id is the reconciliation's and its first
 * consumer id: enqueueing the same consumers again (a reconciliation resumed after a crash)
 * adds nothing while the first job is kept.
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

/** A sync job, deduplicated per consumer (see enqueueRewardSync); the payload is checked. */
export function rewardSyncJob(payload: RewardSyncPayload) {
  const data = parsePayload(rewardSyncPayloadSchema, payload, 'reward sync');
  return {
    name: jobNames.syncRewards,
    data,
    opts: {
      deduplication: { id: data.consumerId, keepLastIfActive: true },
      ...priorityOf(data.reason),
    },
  };
}

function rewardSyncBatchJob(payload: RewardSyncBatchPayload) {
  const data = parsePayload(rewardSyncBatchPayloadSchema, payload, 'reward sync batch');
  const { reconciliation } = data;
  const jobId =
    reconciliation === undefined ? {} : { jobId: `${reconciliation}-${data.consumerIds[0]}` };
  return { name: jobNames.syncRewardsBatch, data, opts: { ...priorityOf(data.reason), ...jobId } };
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
   * BullMQ telemetry, e.g. `new BullMQOtel({ tracerName: 'signup-service' })` from bullmq-otel:
   * each enqueue is a span of the active trace, which the worker's job span continues.
   * Default: none.
   */
  telemetry?: Telemetry;
}

export interface Producer {
  enqueueEnrollment(payload: EnrollmentPayload): Promise<EnqueuedEnrollment>;
  enqueueRewardSync(payload: RewardSyncPayload): Promise<{ jobId: string }>;
  startReconciliation(): Promise<StartedReconciliation>;
  readonly queues: Queues;
  /** Its Redis connection, shared by the queues; closed by `close`. */
  readonly connection: RedisClient;
  close(): Promise<void>;
}

/** A fail-fast producer: rejects at once when Redis is unreachable rather than queueing in memory. */
export async function createProducer(options: ProducerOptions): Promise<Producer> {
  const connection = createRedisConnection(
    { url: options.redisUrl, clusterNodes: options.clusterNodes },
    'producer',
    options.logger,
  );
  try {
    await connected(connection);
  } catch (error) {
    connection.disconnect();
    throw error;
  }
  const queues = openQueues(
    connection,
    options.queuePrefix ?? 'perks',
    options.jobPolicy ?? defaultJobPolicy,
    options.logger,
    options.telemetry,
  );
  return {
    queues,
    connection,
    enqueueEnrollment: (payload) => enqueueEnrollment(queues, payload, options.consumerIdKey),
    enqueueRewardSync: async (payload) => ({
      jobId: (await enqueueRewardSync(queues, payload)).id ?? '',
    }),
    startReconciliation: () => startReconciliation(queues),
    async close() {
      await closeQueues(queues);
      connection.disconnect();
    },
  };
}
