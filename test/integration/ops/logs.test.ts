/**
 * The worker's logs at debug level, through the production logger, after a run with
 * enrollments, syncs, a 401 (token re-minted), retried 502s, a failed job and a
 * reconciliation: no client secret, no Basic credentials and no access token anywhere; one
 * line per page and per job outcome, never one per reward.
 */
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../../src/ops/logger.js';
import { enqueueEnrollment, startReconciliation } from '../../../src/queues/producer.js';
import { credentialsName } from '../../../src/redis/token-cache.js';
import { type Rig, rigConsumerIdKey, startRig } from './rig.js';

/** A JWT (the sandbox's access tokens are ES256 JWTs): three base64url parts. */
const jwtPattern = /eyJ[\w-]{10,}\.eyJ[\w-]{10,}\.[\w-]{10,}/;

const chunks: string[] = [];
const sink = new Writable({
  write(chunk: Buffer, _encoding, done) {
    chunks.push(chunk.toString('utf8'));
    done();
  },
});
const logger = createLogger({ level: 'debug', format: 'json' }, { test: 'logs' }, sink);

let rig: Rig;
let lines: Record<string, unknown>[];
let text: string;
const rewardsPerConsumer = [120, 1500, 40];
let cachedToken: string | undefined;

beforeAll(async () => {
  rig = await startRig({ logger });
  const ids = ['logs-a', 'logs-b', 'logs-c'];
  ids.forEach((id, i) => {
    rig.sandbox.state.addConsumer(id, { enrolled: false, rewards: rewardsPerConsumer[i] ?? 0 });
  });
  // An edge 401 (empty body) makes the client drop its token and mint another.
  rig.sandbox.faults.inject({
    route: 'listRewards',
    consumerId: 'logs-b',
    count: 1,
    kind: 'empty401',
  });
  // Retried 502s, then a job that fails for good.
  rig.sandbox.state.addConsumer('logs-fail', { enrolled: false });
  rig.sandbox.faults.inject({
    route: 'enroll',
    consumerId: 'logs-fail',
    count: 1000,
    kind: 'status',
    status: 502,
  });
  for (const consumerId of [...ids, 'logs-fail']) {
    await enqueueEnrollment(rig.runtime.ctx.queues, { consumerId }, rigConsumerIdKey);
  }
  await rig.idle();
  await startReconciliation(rig.runtime.ctx.queues, 'manual');
  await rig.idle();
  const raw = await rig.runtime.connection.get(
    `${rig.config.redis.queuePrefix}:perks:token:${credentialsName(rig.config.perks)}`,
  );
  cachedToken = raw ? (JSON.parse(raw) as { accessToken?: string }).accessToken : undefined;
  text = chunks.join('');
  lines = text
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}, 120_000);

afterAll(async () => {
  await rig?.close();
});

describe('worker logs', () => {
  it('hold no client secret, no Basic credentials and no access token', async () => {
    expect(lines.length).toBeGreaterThan(20);
    // The run did mint twice (the 401), and a token looks like what the pattern finds.
    expect(rig.sandbox.state.counters().tokensMinted).toBe(2);
    expect(await rig.sandbox.mintToken()).toMatch(jwtPattern);
    expect(cachedToken).toMatch(jwtPattern);

    const secret = rig.config.perks.clientSecret;
    const basic = Buffer.from(`${rig.config.perks.clientId}:${secret}`).toString('base64');
    expect(text).not.toContain(secret);
    expect(text).not.toContain(basic);
    expect(text).not.toContain(cachedToken ?? 'no token');
    expect(text).not.toMatch(jwtPattern);
    expect(text).not.toMatch(/bearer\s+\S/i);
  });

  it('log one line per page of a sync of several and per job outcome, with queue, job id, consumer id, attempt and duration', () => {
    const pages = lines.filter((l) => l.msg === 'reward page written');
    // 120 -> 1 page, 1500 -> 2 pages, 40 -> 1 page; each synced twice (enrollment, reconciliation).
    // A one-page sync has no page line: its job or consumer line says what it wrote.
    expect(pages).toHaveLength(4);
    for (const page of pages) {
      expect(page).toMatchObject({ queue: 'reward-sync', attempt: expect.any(Number), pages: 2 });
      expect(page.jobId).toEqual(expect.any(String));
      expect(page.consumerId).toBe('logs-b');
      expect(page.writeMs).toEqual(expect.any(Number));
    }

    const outcomes = lines.filter((l) =>
      ['job completed', 'job failed', 'job attempt failed; will retry'].includes(String(l.msg)),
    );
    // 4 enrollments (1 of them twice: attempt failed, then failed), 3 syncs after them, the
    // reconciliation, and its one sync job of the 3 consumers.
    expect(outcomes).toHaveLength(10);
    for (const outcome of outcomes) {
      expect(outcome.queue).toEqual(expect.any(String));
      expect(outcome.jobId).toEqual(expect.any(String));
      expect(outcome.attempt).toEqual(expect.any(Number));
      expect(outcome.durationMs).toEqual(expect.any(Number));
      if (outcome.queue === 'reconciliation') continue;
      if (outcome.consumerIds) expect(outcome.consumerIds).toEqual(['logs-a', 'logs-b', 'logs-c']);
      else expect(outcome.consumerId).toMatch(/^logs-/);
    }
    // A job of several: its info line names its consumers and sums what they did; each
    // consumer has a line of its own at debug only (at info, a line per record).
    const batch = outcomes.find((l) => l.consumerIds);
    expect(batch).toMatchObject({ level: 30, result: { consumers: 3, synced: 3 } });
    const synced = lines.filter((l) => l.msg === 'consumer synced');
    expect(synced.map((l) => [l.consumerId, l.jobId, l.outcome, l.level]).sort()).toEqual(
      ['logs-a', 'logs-b', 'logs-c'].map((id) => [id, batch?.jobId, 'synced', 20]),
    );
    const failed = outcomes.filter((l) => l.msg === 'job failed');
    expect(failed).toEqual([
      expect.objectContaining({ queue: 'enrollment', consumerId: 'logs-fail', final: true }),
    ]);

    // Never a line per reward: 3320 rewards were written, in far fewer lines.
    const totalRewards = rewardsPerConsumer.reduce((a, b) => a + b, 0) * 2;
    expect(lines.length).toBeLessThan(totalRewards / 10);
  });
});
