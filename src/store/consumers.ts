/** <schema>.consumers. Every write is an upsert: enrollment, sync and errors arrive in any order. */
import type pg from 'pg';
import type { ConsumerRow, EnrollmentOutcome } from './types.js';

/** A runaway last_error (a whole HTML error page) is cut. */
const maxErrorLength = 2000;

export interface RecordEnrollmentInput {
  consumerId: string;
  userId?: string;
  outcome: EnrollmentOutcome;
  extraConsents: readonly string[];
  removedConsents: readonly string[];
  at: Date;
}

export interface RecordConsumerErrorInput {
  consumerId: string;
  userId?: string;
  /** Shown to support as is: never a secret. */
  message: string;
  at: Date;
}

/** The consumers operations of a store; `s` is the quoted schema. */
export const consumerQueries = (pool: pg.Pool, s: string) => ({
  async recordEnrollment(input: RecordEnrollmentInput): Promise<void> {
    await pool.query(`select ${s}.record_enrollment($1, $2, $3, $4, $5, $6)`, [
      input.consumerId,
      input.userId ?? null,
      input.at,
      input.outcome,
      [...input.extraConsents],
      [...input.removedConsents],
    ]);
  },

  async recordConsumerError(input: RecordConsumerErrorInput): Promise<void> {
    await pool.query(`select ${s}.record_consumer_error($1, $2, $3)`, [
      input.consumerId,
      input.userId ?? null,
      input.message.slice(0, maxErrorLength),
    ]);
  },

  /** ERR-404-02 to a request sent at `at`, unless a newer enrollment or sync won the race. */
  async markNotEnrolled(input: { consumerId: string; at: Date }): Promise<void> {
    await pool.query(`select ${s}.mark_not_enrolled($1, $2)`, [input.consumerId, input.at]);
  },

  /** The consumer a user id is recorded for (consumers.user_id is unique), if any. */
  async consumerOfUser(userId: string): Promise<string | undefined> {
    const { rows } = await pool.query<{ consumer_id: string }>(
      `select consumer_id from ${s}.consumers where user_id = $1`,
      [userId],
    );
    return rows[0]?.consumer_id;
  },

  async getConsumer(consumerId: string): Promise<ConsumerRow | undefined> {
    const { rows } = await pool.query<ConsumerRow>(
      `select consumer_id as "consumerId", user_id as "userId", enrolled_at as "enrolledAt",
         enrollment_outcome as "enrollmentOutcome", extra_consents as "extraConsents",
         removed_consents as "removedConsents", last_synced_at as "lastSyncedAt",
         not_enrolled_at as "notEnrolledAt", last_error as "lastError", updated_at as "updatedAt"
       from ${s}.consumers where consumer_id = $1`,
      [consumerId],
    );
    return rows[0];
  },

  /**
   * A keyset page of the consumers to reconcile: every row whose not_enrolled_at is null (a
   * failed enrollment's sync answers ERR-404-02 and drops it). `after`: the last id of a page.
   */
  async listEnrolledConsumerIds(input: { after: string | null; limit: number }): Promise<string[]> {
    if (!Number.isInteger(input.limit) || input.limit < 1) {
      throw new RangeError(`limit must be a positive integer, got ${input.limit}`);
    }
    const { rows } = await pool.query<{ consumer_id: string }>(
      `select consumer_id from ${s}.consumers
       where not_enrolled_at is null and consumer_id > $1
       order by consumer_id limit $2`,
      [input.after ?? '', input.limit],
    );
    return rows.map((r) => r.consumer_id);
  },

  /** listEnrolledConsumerIds' rule, counted. */
  async countReconcilableConsumers(): Promise<number> {
    const { rows } = await pool.query<{ n: number }>(
      `select count(*)::int as n from ${s}.consumers where not_enrolled_at is null`,
    );
    return rows[0]?.n ?? 0;
  },
});
