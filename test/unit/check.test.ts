/** `check`'s pure parts: reading a schema's migrations, and how a line is written and cleaned. */
import { describe, expect, it } from 'vitest';
import { fail, formatLine, pass, scrub, skip } from '../../src/cli/check-result.js';
import { schemaResult } from '../../src/cli/check-stores.js';
import type { MigrationFile } from '../../src/store/migrate.js';

const file = (version: string, checksum = `sum${version}`): MigrationFile => ({
  version,
  name: `m${version}`,
  file: `${version}_m${version}.sql`,
  sql: '',
  checksum,
});
const files = [file('000001'), file('000002'), file('000003')];
const applied = (...versions: string[]) => new Map(versions.map((v) => [v, `sum${v}`]));

describe('schemaResult', () => {
  it('passes when every migration of this build is applied', () => {
    expect(schemaResult('perks', files, applied('000001', '000002', '000003'))).toEqual(
      pass('schema', 'perks', 'migrated (at 000003, 3 migrations)'),
    );
  });

  it('fails with the fix when nothing or only part is applied', () => {
    expect(schemaResult('perks', files, new Map())).toEqual(
      fail('schema', 'perks', 'not migrated (0 of 3 migrations)', 'run perks-worker migrate'),
    );
    expect(schemaResult('perks', files, applied('000001'))).toEqual(
      fail(
        'schema',
        'perks',
        '2 migrations pending (000002_m000002.sql, 000003_m000003.sql)',
        'run perks-worker migrate',
      ),
    );
    expect(schemaResult('perks', files, applied('000001', '000002')).detail).toBe(
      '1 migration pending (000003_m000003.sql)',
    );
  });

  it('passes a schema a later release migrated further: migrations only add', () => {
    const result = schemaResult('perks', files, applied('000001', '000002', '000003', '000004'));
    expect(result).toEqual(
      pass('schema', 'perks', 'migrated (at 000004, 4 migrations, 1 from a later release)'),
    );
  });

  it('fails when an applied migration differs from the file', () => {
    const result = schemaResult('perks', files, new Map([['000001', 'another']]));
    expect(result.ok).toBe(false);
    expect(result.detail).toBe('migration 000001_m000001.sql differs from the one applied');
  });
});

describe('formatLine and scrub', () => {
  it('writes ✓, ✗ with the fix, and - for what was not checked', () => {
    expect(formatLine(pass('redis', 'redis://h:6379', 'reachable (7.2.4)'))).toBe(
      '✓ redis redis://h:6379: reachable (7.2.4)',
    );
    expect(formatLine(fail('schema', 'perks', 'not migrated', 'run perks-worker migrate'))).toBe(
      '✗ schema perks: not migrated — fix: run perks-worker migrate',
    );
    const skipped = skip('rabbitmq', undefined, 'not configured (INTAKE_AMQP_URL unset)');
    expect(formatLine(skipped)).toBe('- rabbitmq: not configured (INTAKE_AMQP_URL unset)');
    expect(skipped.ok).toBe(true);
  });

  it('masks secrets and URL passwords, and keeps a result on one line', () => {
    const echoed = fail(
      'perks api',
      'https://u:pa55word@api.example',
      'refused (body: "secret-of-the-client sk_live_abc123 Bearer eyJa.b.c")\nsecond line',
      'check amqp://guest:guest@host',
    );
    const clean = scrub(echoed, ['secret-of-the-client']);
    const text = JSON.stringify(clean);
    for (const leak of [
      'pa55word',
      'secret-of-the-client',
      'sk_live_abc123',
      'eyJa.b.c',
      ':guest@',
    ]) {
      expect(text).not.toContain(leak);
    }
    expect(formatLine(clean)).not.toContain('\n');
    expect(clean.target).toBe('https://u:***@api.example');
  });
});
