/** Runs the built `perks-worker` bin as a user would (npm test builds it first). */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const bin = fileURLToPath(new URL('../../dist/src/index.js', import.meta.url));

function run(args: string[], env: Record<string, string> = {}) {
  const result = spawnSync(process.execPath, [bin, ...args], {
    env: { PATH: process.env.PATH ?? '', ...env },
    encoding: 'utf8',
    timeout: 20_000,
  });
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

describe('perks-worker CLI', () => {
  it('lists its commands', () => {
    const { status, stdout } = run(['--help']);
    expect(status).toBe(0);
    for (const name of [
      'work',
      'migrate',
      'enroll',
      'sync',
      'reconcile',
      'status',
      'failed',
      'sandbox',
      'demo',
    ]) {
      expect(stdout).toMatch(new RegExp(`^  ${name} `, 'm'));
    }
  });

  it('names a missing required variable in one line and exits non-zero', () => {
    const { status, stderr } = run(['work'], {
      PERKS_CLIENT_ID: 'cli_1',
      PERKS_CLIENT_SECRET: 'sk_sandbox_abc',
    });
    expect(status).toBe(2);
    expect(stderr.trim().split('\n')).toEqual([
      'perks-worker: PERKS_BASE_URL is not set (example: PERKS_BASE_URL=https://api.perks.example/programs/acme)',
    ]);
    expect(stderr).not.toMatch(/\bat .*\.js:\d+/); // no stack trace
  });

  it('rejects an unknown command in one line', () => {
    const { status, stderr } = run(['enrol']);
    expect(status).toBe(2);
    expect(stderr).toBe(`perks-worker: unknown command "enrol"; run 'perks-worker --help'\n`);
  });
});
