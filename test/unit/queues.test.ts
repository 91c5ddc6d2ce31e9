import { describe, expect, it } from 'vitest';
import { ConsumerIdKeyMissingError, deriveConsumerId } from '../../src/queues/consumer-id.js';
import { jobSubject } from '../../src/queues/inspect.js';
import { enrollmentJobId } from '../../src/queues/names.js';
import {
  enrollmentPayloadSchema,
  enrollmentRequestSchema,
  InvalidPayloadError,
  parsePayload,
  rewardSyncBatchPayloadSchema,
  rewardSyncPayloadSchema,
} from '../../src/queues/payloads.js';
import { enqueueRewardSyncs } from '../../src/queues/producer.js';

const key = 'unit-test-key-0123456789abcdef';

describe('deriveConsumerId', () => {
  it('keeps a user id that is already a valid consumer id', () => {
    expect(deriveConsumerId('customer-0042', key)).toBe('customer-0042');
    expect(deriveConsumerId('ab', undefined)).toBe('ab');
  });

  it('derives a stable, valid id from any other user id', () => {
    const a = deriveConsumerId('alice@example.com', key);
    expect(a).toMatch(/^u_[a-z2-7]{52}$/);
    expect(deriveConsumerId('alice@example.com', key)).toBe(a);
    expect(deriveConsumerId('alice@example.com', `${key}x`)).not.toBe(a);
    expect(deriveConsumerId('x', key)).toMatch(/^u_/); // too short to be a consumer id
    expect(deriveConsumerId('a'.repeat(101), key)).toMatch(/^u_/); // too long
  });

  it('matches a known vector (the derivation must never change)', () => {
    expect(
      deriveConsumerId('alice@example.com', 'fixed-test-key-0123456789'),
    ).toMatchInlineSnapshot(`"u_djzvvo2lboabh34wka2hwyvsg25miptugqkzzakborxzh3amc2uq"`);
  });

  it('refuses to derive without a key, naming the field', () => {
    expect(() => deriveConsumerId('bob@example.com', undefined)).toThrow(ConsumerIdKeyMissingError);
    expect(() => deriveConsumerId('bob@example.com', undefined)).toThrow(
      /^userId: .*PERKS_CONSUMER_ID_KEY/,
    );
  });

  it('gives job ids BullMQ accepts (no colon, not all digits)', () => {
    const id = enrollmentJobId(deriveConsumerId('12345', key));
    expect(id).not.toContain(':');
    expect(id).not.toMatch(/^\d+$/);
  });
});

describe('job payloads', () => {
  const reason = (schema: Parameters<typeof parsePayload>[0], data: unknown) => {
    try {
      parsePayload(schema, data, 'test');
    } catch (error) {
      expect(error).toBeInstanceOf(InvalidPayloadError);
      return (error as Error).message;
    }
    return 'valid';
  };

  it('accepts a userId or a consumerId with known consents', () => {
    expect(reason(enrollmentRequestSchema, { userId: 'a@b.c', extraConsents: ['TARGETING'] })).toBe(
      'valid',
    );
    expect(
      reason(enrollmentRequestSchema, { consumerId: 'c_1', removedConsents: ['STATISTICS'] }),
    ).toBe('valid');
  });

  it('takes only enrollment jobs that carry their consumer id', () => {
    expect(reason(enrollmentPayloadSchema, { userId: 'a@b.c', consumerId: 'u_1' })).toBe('valid');
    expect(reason(enrollmentPayloadSchema, { userId: 'a@b.c' })).toMatch(
      /^invalid test payload: consumerId: /,
    );
  });

  it('names the offending field', () => {
    expect(reason(enrollmentRequestSchema, {})).toMatch(
      /userId: one of userId or consumerId is required/,
    );
    expect(reason(enrollmentRequestSchema, { userId: 7 })).toMatch(/userId: must be a string/);
    expect(reason(enrollmentRequestSchema, { userId: '' })).toMatch(/userId: must not be empty/);
    expect(reason(enrollmentRequestSchema, { userId: 'u'.repeat(10_000) })).toMatch(
      /userId: must be at most 256/,
    );
    expect(
      reason(enrollmentRequestSchema, { userId: 'a', extraConsents: ['BASIC', 'ALL'] }),
    ).toMatch(/extraConsents\[1\]/);
    expect(reason(enrollmentRequestSchema, { consumerId: 'has space' })).toMatch(
      /^invalid test payload: consumerId: /,
    );
    expect(reason(enrollmentRequestSchema, { userId: 'a', surprise: 1 })).toBe(
      'invalid test payload: surprise: is not a known field',
    );
    expect(reason(rewardSyncPayloadSchema, { consumerId: ['c_1'] })).toMatch(/consumerId: /);
    expect(reason(rewardSyncPayloadSchema, null)).toBe(
      'invalid test payload: (payload): must be a JSON object',
    );
  });

  it('takes 1 to 100 distinct consumer ids in a sync job of several, naming the bad one', () => {
    const ids = (n: number) => Array.from({ length: n }, (_, i) => `c_${i}`);
    expect(reason(rewardSyncBatchPayloadSchema, { consumerIds: ids(100), reason: 'manual' })).toBe(
      'valid',
    );
    expect(reason(rewardSyncBatchPayloadSchema, { consumerIds: [] })).toMatch(
      /consumerIds: must not be empty/,
    );
    expect(reason(rewardSyncBatchPayloadSchema, { consumerIds: ids(101) })).toMatch(
      /consumerIds: must hold at most 100 consumer ids/,
    );
    expect(reason(rewardSyncBatchPayloadSchema, { consumerIds: ['c_1', 'c_2', 'c_1'] })).toMatch(
      /consumerIds: must not repeat a consumer id/,
    );
    expect(reason(rewardSyncBatchPayloadSchema, { consumerIds: ['c_1', 'has space'] })).toMatch(
      /consumerIds\[1\]: /,
    );
    expect(reason(rewardSyncBatchPayloadSchema, { consumerId: 'c_1' })).toMatch(/consumerId/);
  });
});

describe('jobSubject', () => {
  it('names the consumer of a job, or the first of several and how many more', () => {
    expect(jobSubject({ consumerId: 'c_1' })).toBe('c_1');
    expect(jobSubject({ userId: 'u@x' })).toBe('u@x');
    expect(jobSubject({ consumerIds: ['c_1', 'c_2', 'c_3'] })).toBe('c_1 +2 more');
    expect(jobSubject({ consumerIds: ['c_1'] })).toBe('c_1');
    expect(jobSubject({ consumerIds: [7] })).toBe('');
    expect(jobSubject({ consumerIds: 'c_1' })).toBe('');
    expect(jobSubject(null)).toBe('');
  });
});

describe('enqueueRewardSyncs', () => {
  it('refuses a number of consumers per job that is not a whole number from 1', async () => {
    const queues = {} as Parameters<typeof enqueueRewardSyncs>[0];
    await expect(
      enqueueRewardSyncs(queues, ['c_1'], 'manual', { consumersPerJob: 0 }),
    ).rejects.toThrow(/consumersPerJob must be a whole number from 1, not 0/);
    await expect(
      enqueueRewardSyncs(queues, ['c_1'], 'manual', { consumersPerJob: 1.5 }),
    ).rejects.toThrow(RangeError);
  });
});
