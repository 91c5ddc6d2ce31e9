/**
 * The README's first command: `perks-worker demo` runs the whole job against its built-in
 * sandbox and explains the figures where upstream and the datastore differ by design.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import { runCli } from '../support/processes.js';
import { testQueuePrefix } from '../support/redis.js';

let db: TestDatabase;
const queues = testQueuePrefix();

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  await queues.cleanup();
  await db?.drop();
});

describe('perks-worker demo', () => {
  it('enrolls, syncs, reconciles and explains its two honest differences', async () => {
    const { status, stdout, stderr } = await runCli(
      ['demo', '--customers', '40'],
      {
        REDIS_URL: queues.redisUrl,
        DATABASE_URL: db.url,
        QUEUE_PREFIX: queues.prefix,
        // Its progress counts the jobs done, not the completed ones the queues keep.
        KEEP_COMPLETED_JOBS: '10',
      },
      { timeoutMs: 110_000 },
    );
    const output = stdout + stderr;
    expect(output).toMatch(/enrollments done 40 \(failed 0\), sync jobs done [4-9]\d /);
    expect(output).toMatch(/^last reconciliation: FINISHED \(job reconcile-/m);
    expect(output).toContain('consumers 40 in all: 40 synced, 0 failed, 0 not enrolled');
    expect(output).toContain('two honest differences between upstream and the datastore:');
    expect(output).toMatch(/rewards moved upstream, \d+ status changes recorded: 1 moved reward/);
    expect(output).toContain(
      '1 POST /perks/consumers timed out after the API had applied it; the retry got 409',
    );
    expect(status).toBe(0);
  }, 120_000);
});
