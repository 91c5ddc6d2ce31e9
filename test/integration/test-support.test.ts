/** The test harness itself: a database and a queue prefix per file, really isolated. */
import { Redis } from 'ioredis';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { createTestDatabase } from '../support/database.js';
import { testQueuePrefix } from '../support/redis.js';

describe('test isolation', () => {
  const queues = testQueuePrefix();
  afterAll(() => queues.cleanup());

  it('gives each file its own database, dropped afterwards', async () => {
    const a = await createTestDatabase();
    const b = await createTestDatabase();
    expect(a.name).not.toBe(b.name);
    const client = new pg.Client(a.url);
    await client.connect();
    const { rows } = await client.query<{ db: string }>('select current_database() as db');
    await client.end();
    expect(rows[0]?.db).toBe(a.name);
    await a.drop();
    await b.drop();
    const again = new pg.Client(a.url);
    await expect(again.connect()).rejects.toThrow(/does not exist/);
  });

  it('gives each file its own queue prefix, emptied by cleanup', async () => {
    const redis = new Redis(queues.redisUrl);
    await redis.set(`${queues.prefix}:probe`, '1');
    await queues.cleanup();
    expect(await redis.exists(`${queues.prefix}:probe`)).toBe(0);
    redis.disconnect();
  });
});
