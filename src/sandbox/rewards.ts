/**
 * Generates every shape the spec admits: amounts in all the pattern's forms, gifts with a null
 * transaction, a logo null, absent or a URL, now and then an unknown field.
 */
import type { SeededRandom } from './random.js';

/** A reward as the API serialises it (an open schema). */
export interface RewardJson {
  id: string;
  amount: string;
  created_at: string;
  type: string;
  status: string;
  consumer_status: string;
  transaction: { external_id: string; executed_at: string } | null;
  brand: { name: string | null; logo?: string | null };
  [extra: string]: unknown;
}

/** Known status -> consumer_status; an unknown status keeps the reward's previous value. */
export const consumerStatusOf: Readonly<Record<string, string>> = {
  VALIDATED: 'VALIDATION',
  PAID_IN: 'POOLED',
  PAID_OUT: 'PAID',
};

const brands = ['Carrefour', 'Fnac', 'Decathlon', 'Sephora', 'Boulanger', 'Picard', 'Leroy Merlin'];
// 2025: generated data never depends on the current date.
const epochStart = Date.UTC(2025, 0, 1);
const yearMs = 365 * 24 * 3600 * 1000;

export function generateReward(rng: SeededRandom): RewardJson {
  const id = rng.uuid();
  const gift = rng.chance(0.2);
  const createdMs = epochStart + Math.floor(rng.next() * yearMs);
  const status = rng.pick(['VALIDATED', 'VALIDATED', 'PAID_IN', 'PAID_OUT']);
  const reward: RewardJson = {
    id,
    amount: generateAmount(rng),
    created_at: timestamp(createdMs, rng),
    type: gift ? 'GIFT' : 'CASHBACK',
    status,
    consumer_status: consumerStatusOf[status] ?? 'VALIDATION',
    transaction: gift
      ? null
      : {
          external_id: `tx_${rng.hex(16)}`,
          // Up to three days before the reward.
          executed_at: timestamp(createdMs - rng.int(0, 3 * 24 * 3600) * 1000, rng),
        },
    brand: generateBrand(rng),
  };
  if (rng.chance(0.1)) reward.campaign_ref = `cmp_${rng.hex(8)}`;
  return reward;
}

function generateAmount(rng: SeededRandom): string {
  const cents = rng.int(1, 5000);
  const canonical = `${Math.floor(cents / 100)}.${String(cents % 100).padStart(2, '0')}`;
  if (rng.chance(0.7)) return canonical;
  const oddForms = [
    () => `+00${canonical}`,
    () => `.${rng.int(1, 9)}`,
    () => `${rng.int(1, 99)}.`,
    () => `-${rng.int(1, 20)}`,
    () => '0',
    () => `-${canonical}`,
  ];
  return rng.pick(oddForms)();
}

function generateBrand(rng: SeededRandom): RewardJson['brand'] {
  const name = rng.chance(0.05) ? null : rng.pick(brands);
  const roll = rng.next();
  if (roll < 0.15) return { name };
  if (roll < 0.35) return { name, logo: null };
  const slug = (name ?? 'brand').toLowerCase().replace(/[^a-z]+/g, '-');
  return { name, logo: `https://cdn.perks.example/brands/${slug}.png` };
}

/** RFC 3339 UTC, sometimes with milliseconds. */
function timestamp(ms: number, rng: SeededRandom): string {
  const iso = new Date(ms).toISOString();
  return rng.chance(0.25) ? iso : `${iso.slice(0, 19)}Z`;
}
