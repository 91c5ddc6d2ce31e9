import { describe, expect, it } from 'vitest';
import { uuidArrayParameter } from '../../src/store/rewards.js';

describe('uuidArrayParameter', () => {
  it('joins plain uuids, of either case, into PostgreSQL array text', () => {
    expect(
      uuidArrayParameter([
        '0b9b3a52-4c6e-4c1e-9f6a-2d0c1e5b7a10',
        'A1B2C3D4-E5F6-47A8-99B0-C1D2E3F4A5B6',
      ]),
    ).toBe('{0b9b3a52-4c6e-4c1e-9f6a-2d0c1e5b7a10,A1B2C3D4-E5F6-47A8-99B0-C1D2E3F4A5B6}');
    expect(uuidArrayParameter([])).toBe('{}');
  });

  it('leaves a list holding any other id to node-postgres, which quotes each element', () => {
    // Joined as is, these would add elements or end the array early.
    for (const odd of [
      '0b9b3a52-4c6e-4c1e-9f6a-2d0c1e5b7a10,0b9b3a52-4c6e-4c1e-9f6a-2d0c1e5b7a11',
      'x"}',
      '',
      ' 0b9b3a52-4c6e-4c1e-9f6a-2d0c1e5b7a10',
    ]) {
      const ids = ['0b9b3a52-4c6e-4c1e-9f6a-2d0c1e5b7a10', odd];
      expect(uuidArrayParameter(ids)).toBe(ids);
    }
  });
});
