/** Builders shared by the store tests. */
import { randomUUID } from 'node:crypto';
import type { RewardRecord } from '../../../src/store/store.js';

export function reward(overrides: Partial<RewardRecord> = {}): RewardRecord {
  const id = overrides.id ?? randomUUID();
  const base: RewardRecord = {
    id,
    amount: '12.50',
    createdAt: '2026-01-02T03:04:05Z',
    type: 'CASHBACK',
    status: 'VALIDATED',
    consumerStatus: 'VALIDATION',
    transaction: { externalId: `tx-${id.slice(0, 8)}`, executedAt: '2026-01-01T10:00:00Z' },
    brand: { name: 'Acme', logo: 'https://cdn.example/acme.png' },
    raw: {},
  };
  const merged = { ...base, ...overrides };
  // raw mirrors the API item, as the client would keep it.
  merged.raw = overrides.raw ?? {
    id,
    amount: merged.amount,
    created_at: merged.createdAt,
    type: merged.type,
    status: merged.status,
    consumer_status: merged.consumerStatus,
    transaction: merged.transaction && {
      external_id: merged.transaction.externalId,
      executed_at: merged.transaction.executedAt,
    },
    brand: merged.brand,
  };
  return merged;
}

/** A status move, with raw kept in step as the API would send it. */
export function withStatus(r: RewardRecord, status: string, consumerStatus: string): RewardRecord {
  return {
    ...r,
    status,
    consumerStatus,
    raw: { ...r.raw, status, consumer_status: consumerStatus },
  };
}

export const at = (iso: string) => new Date(iso);
