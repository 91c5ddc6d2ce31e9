import { describe, expect, it } from 'vitest';
import { parseRewardPage } from '../../../src/perks/paging.js';
import {
  AMOUNT_PATTERN,
  amountSchema,
  CONSENTS,
  canonicalDecimal,
  consentSchema,
  consumerIdSchema,
  isConsumerId,
  type Reward,
  safeParseReward,
} from '../../../src/perks/schemas.js';
import { wireReward } from './fake-api.js';

/** The store's copy of the shared contract: the client's Reward must be assignable to it. */
interface RewardRecord {
  id: string;
  amount: string;
  createdAt: string;
  type: string;
  status: string;
  consumerStatus: string;
  transaction: { externalId: string; executedAt: string } | null;
  brand: { name: string | null; logo?: string | null };
  raw: Record<string, unknown>;
}

describe('amounts', () => {
  it.each([
    ['+0012.50', '12.50'],
    ['.5', '0.5'],
    ['7.', '7'],
    ['-3', '-3'],
    ['-0.0', '0.0'],
    ['0', '0'],
    ['000', '0'],
    ['-.25', '-0.25'],
    ['12.50', '12.50'],
  ])('accepts %j as %j', (input, canonical) => {
    expect(amountSchema.parse(input)).toBe(canonical);
    expect(canonicalDecimal(input)).toBe(canonical);
  });

  it.each(['1e5', '12,5', '', '+', '-', '.', '+.', '1.2.3', ' 1', 'NaN', '١٢'])(
    'rejects %j',
    (input) => {
      expect(amountSchema.safeParse(input).success).toBe(false);
      expect(() => canonicalDecimal(input)).toThrow(RangeError);
    },
  );

  it('returns canonical amounts as they are, and is idempotent on every form', () => {
    for (const canonical of ['0', '10', '12.50', '0.05', '-0.05', '-3', '-10.0', '0.00']) {
      expect(canonicalDecimal(canonical)).toBe(canonical);
    }
    const parts = ['', '+', '-', '0', '00', '1', '10', '.', '.0', '.05', '.50', '9'];
    for (const a of parts) {
      for (const b of parts) {
        for (const c of parts) {
          const input = a + b + c;
          if (!AMOUNT_PATTERN.test(input)) continue;
          const once = canonicalDecimal(input);
          expect(canonicalDecimal(once), input).toBe(once);
          expect(Number(once), input).toBe(Number(input) === 0 ? 0 : Number(input));
          expect(once, input).not.toMatch(/^\+|^-?0\d|\.$|^-0*\.?0*$/);
        }
      }
    }
  });

  it('never turns an amount into a JS number', () => {
    expect(amountSchema.parse('12345678901234567890.123456789')).toBe(
      '12345678901234567890.123456789',
    );
  });
});

describe('consumer ids and consents', () => {
  it.each(['ab', 'user_42', 'A-b_9', 'x'.repeat(100)])('accepts %j', (id) => {
    expect(isConsumerId(id)).toBe(true);
    expect(consumerIdSchema.safeParse(id).success).toBe(true);
  });
  it.each(['a', '', 'x'.repeat(101), 'has space', 'é', 'a/b', 'a.b'])('rejects %j', (id) => {
    expect(isConsumerId(id)).toBe(false);
  });
  it('knows the six consents', () => {
    expect(CONSENTS).toEqual([
      'BASIC',
      'TRANSACTION_TRIGGERS',
      'TARGETING',
      'STATISTICS',
      'SMART_RANKING',
      'WEB_ANALYTICS',
    ]);
    expect(consentSchema.safeParse('MARKETING').success).toBe(false);
  });
});

/** The parsed reward; fails the test, with zod's first issue, when the item is refused. */
function parseReward(item: unknown): Reward {
  const parsed = safeParseReward(item);
  if (!parsed.success) throw new Error(parsed.error.issues[0]?.message);
  return parsed.data;
}

describe('safeParseReward', () => {
  it('maps the wire reward to the shared contract, keeping the raw item', () => {
    const wire = wireReward({ id: 'AAAAAAAA-0000-4000-8000-00000000000A', extra_field: { x: 1 } });
    const reward: Reward = parseReward(wire);
    const record: RewardRecord = reward;
    expect(record).toEqual({
      id: 'aaaaaaaa-0000-4000-8000-00000000000a',
      amount: '12.50',
      createdAt: wire.created_at,
      type: 'CASHBACK',
      status: 'VALIDATED',
      consumerStatus: 'VALIDATION',
      transaction: { externalId: expect.any(String), executedAt: '2024-04-30T09:00:00Z' },
      brand: { name: 'Acme', logo: 'https://cdn.perks.test/acme.png' },
      raw: wire,
    });
    expect(reward.raw.extra_field).toEqual({ x: 1 });
  });

  it('accepts a null transaction, a null or absent logo, a null brand name', () => {
    const gift = parseReward(
      wireReward({ type: 'GIFT', transaction: null, brand: { name: null, logo: null } }),
    );
    expect(gift.transaction).toBeNull();
    expect(gift.brand).toEqual({ name: null, logo: null });
    const noLogo = parseReward(wireReward({ brand: { name: 'Acme' } }));
    expect(noLogo.brand).toEqual({ name: 'Acme' });
    expect('logo' in noLogo.brand).toBe(false);
  });

  it('accepts a logo of any scheme, and amounts up to what PostgreSQL numeric stores', () => {
    for (const logo of ['data:image/png;base64,iVBO', 'ftp://cdn.test/a.png', 'urn:logo:acme']) {
      expect(parseReward(wireReward({ brand: { name: 'A', logo } })).brand.logo).toBe(logo);
    }
    const widest = `-${'0'.repeat(50)}${'9'.repeat(131072)}.${'9'.repeat(16383)}`;
    expect(parseReward(wireReward({ amount: widest })).amount).toBe(widest.replace(/0{50}/, ''));
    const tooLong = safeParseReward(wireReward({ amount: `1${'0'.repeat(131072)}` }));
    expect(!tooLong.success && tooLong.error.issues[0]?.message).toMatch(/at most 131072 digits/);
  });

  it('accepts unknown type and status values (open sets)', () => {
    const reward = parseReward(wireReward({ type: 'VOUCHER', status: 'CANCELLED' }));
    expect(reward.type).toBe('VOUCHER');
    expect(reward.status).toBe('CANCELLED');
  });

  it('accepts empty strings where the spec gives no length: type, status, external_id', () => {
    const transaction = { external_id: '', executed_at: '2024-05-01T10:00:00Z' };
    const reward = parseReward(wireReward({ type: '', status: '', transaction }));
    expect(reward).toMatchObject({ type: '', status: '', transaction: { externalId: '' } });
  });

  it.each([
    ['created_at without Z', { created_at: '2024-05-01T10:00:00' }, 'created_at'],
    ['created_at with an offset', { created_at: '2024-05-01T10:00:00+02:00' }, 'created_at'],
    ['an unknown consumer_status', { consumer_status: 'REFUNDED' }, 'consumer_status'],
    ['a non-uuid id', { id: '1234' }, 'id'],
    ['an amount in exponent form', { amount: '1e5' }, 'amount'],
    ['an amount as a number', { amount: 12.5 }, 'amount'],
    ['a brand without the name key', { brand: { logo: null } }, 'brand.name'],
    ['a relative logo', { brand: { name: 'A', logo: '/logo.png' } }, 'brand.logo'],
    ['a logo without a scheme', { brand: { name: 'A', logo: 'cdn.test/logo.png' } }, 'brand.logo'],
    ['an amount past numeric', { amount: `0.${'1'.repeat(16384)}` }, 'amount'],
    [
      'a logo over 2083 chars',
      { brand: { name: 'A', logo: `https://x.test/${'a'.repeat(2070)}` } },
      'brand.logo',
    ],
    [
      'a transaction without external_id',
      { transaction: { executed_at: '2024-01-01T00:00:00Z' } },
      'transaction.external_id',
    ],
    ['a missing transaction key', { transaction: undefined }, 'transaction'],
    // The shared conventions: "Timestamps: RFC 3339, UTC, always Z-suffixed".
    [
      'an executed_at with an offset',
      { transaction: { external_id: 'tx1', executed_at: '2024-04-30T11:00:00+02:00' } },
      'transaction.executed_at',
    ],
    // Not URIs, which z.url() takes (it trims, and allows spaces and backslashes).
    [
      'a logo with a space',
      { brand: { name: 'A', logo: 'https://cdn.test/a logo.png' } },
      'brand.logo',
    ],
    [
      'a logo with a leading space',
      { brand: { name: 'A', logo: ' https://cdn.test/a.png' } },
      'brand.logo',
    ],
    [
      'a logo ending in a newline',
      { brand: { name: 'A', logo: 'https://cdn.test/a.png\n' } },
      'brand.logo',
    ],
    ['a Windows path as logo', { brand: { name: 'A', logo: 'C:\\logos\\acme.png' } }, 'brand.logo'],
  ])('rejects %s', (_name, overrides, field) => {
    const result = safeParseReward(wireReward(overrides));
    expect(result.success).toBe(false);
    expect(!result.success && result.error.issues[0]?.path.join('.')).toBe(field);
  });
});

describe('parseRewardPage', () => {
  it('sets each bad item aside with every failing field named; keeps the others', () => {
    const items: unknown[] = [wireReward(), wireReward(), wireReward(), wireReward(), 7];
    items[1] = wireReward({ id: 'not-a-uuid' });
    items[3] = wireReward({ amount: '1e5', brand: { name: 'A', logo: 'logo.png' } });
    const page = parseRewardPage('listRewardPages', {
      items,
      meta: { page: 1, per_page: 10, total: 5 },
    });
    expect(page.items.map((r) => r.raw)).toEqual([items[0], items[2]]);
    expect(page.rejected).toEqual([
      { rewardId: null, raw: JSON.stringify(items[1]), error: 'id: must be a uuid' },
      {
        rewardId: (items[3] as { id: string }).id.toLowerCase(),
        raw: JSON.stringify(items[3]),
        error:
          'amount: must be a decimal string matching the spec pattern; brand.logo: must be an absolute URI',
      },
      {
        rewardId: null,
        raw: '7',
        error: '(item): Invalid input: expected object, received number',
      },
    ]);
  });

  it.each([
    ['no meta', { items: [] }, 'meta'],
    ['a string total', { items: [], meta: { page: 1, per_page: 10, total: '3' } }, 'meta.total'],
    ['items not an array', { items: {}, meta: { page: 1, per_page: 10, total: 0 } }, 'items'],
  ])('rejects an envelope with %s', (_name, json, path) => {
    expect(catchError(() => parseRewardPage('listRewardPages', json))).toMatchObject({ path });
  });

  it('tolerates extra envelope and meta fields', () => {
    const page = parseRewardPage('listRewardPages', {
      items: [wireReward()],
      meta: { page: 1, per_page: 10, total: 1, next: null },
      links: {},
    });
    expect(page.items).toHaveLength(1);
  });
});

function catchError(fn: () => unknown): unknown {
  try {
    fn();
  } catch (error) {
    return error;
  }
  throw new Error('expected a throw');
}
