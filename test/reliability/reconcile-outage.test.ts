/**
 * A reconciliation while PostgreSQL is away: its fan-out goes back to wait, spending no attempt
 * however long the outage lasts, and resumes from its cursor once PostgreSQL answers; its gauge
 * says no fan-out runs meanwhile.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { startReconciliation } from '../../src/reconciliation/index.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import { sleep, waitFor } from '../support/processes.js';
import { startTcpProxy, type TcpProxy, targetOf } from '../support/tcp-proxy.js';
import { type Harness, startHarness } from '../support/worker-harness.js';

let harness: Harness | undefined;
let db: TestDatabase | undefined;
let proxy: TcpProxy | undefined;
afterEach(async () => {
  proxy?.resume();
  await harness?.close();
  await proxy?.close();
  await db?.drop();
});

/** 30 consumers enrolled, fanned out 10 at a time into a backlog no worker drains. */
async function fanningOut() {
  db = await createTestDatabase();
  proxy = await startTcpProxy(targetOf(db.url));
  const h = await startHarness({
    env: {
      DATABASE_URL: proxy.urlFor(db.url),
      RECONCILE_BATCH_SIZE: '10',
      RECONCILE_MAX_PENDING: '1',
      // Spent on the outage, these would be gone in well under a second.
      JOB_ATTEMPTS: '2',
      JOB_BACKOFF_MS: '100',
    },
  });
  harness = h;
  for (let i = 0; i < 30; i++) {
    await h.runtime.ctx.store.recordEnrollment({
      consumerId: `pg_${String(i).padStart(2, '0')}`,
      outcome: 'created',
      extraConsents: [],
      removedConsents: [],
      at: new Date(),
    });
  }
  await h.worker.workers.rewardSync.close(); // the fan-out waits for room: we make it
  const { jobId } = await startReconciliation(h.runtime.ctx.queues);
  const job = () => h.runtime.ctx.queues.reconciliation.getJob(jobId);
  await waitFor('a first batch', async () => ((await job())?.data.enqueued ? true : undefined));
  return { h, job, proxy };
}

const gauge = async (h: Harness) => {
  const text = await (await fetch(`${h.opsUrl}/metrics`)).text();
  return Number(/^perks_worker_reconciliation_enqueued_consumers (\S+)/m.exec(text)?.[1]);
};

describe('a reconciliation and PostgreSQL away', () => {
  it('is resumed once PostgreSQL is back after 5 s, no attempt spent', async () => {
    const { h, job, proxy } = await fanningOut();
    proxy.pause();
    await h.runtime.ctx.queues.rewardSync.drain(); // room: it reads its next batch, and fails
    await sleep(5000);
    proxy.resume();
    const end = await waitFor(
      'the fan-out to end',
      async () => {
        await h.runtime.ctx.queues.rewardSync.drain();
        const j = await job();
        const state = await j?.getState();
        const data = j?.data;
        return state === 'failed' || state === 'completed'
          ? { state, data, attemptsMade: j?.attemptsMade }
          : undefined;
      },
      40_000,
    );
    // Completed on its first counted attempt: the outage spent none.
    expect(end).toMatchObject({ state: 'completed', data: { enqueued: 30 }, attemptsMade: 1 });
  }, 60_000);

  it('its gauge is 0 while it waits for PostgreSQL', async () => {
    const { h, job, proxy } = await fanningOut();
    expect(await gauge(h)).toBe(10);
    proxy.pause();
    await h.runtime.ctx.queues.rewardSync.drain();
    await waitFor('back to wait', async () =>
      (await (await job())?.getState()) === 'waiting' ? true : undefined,
    );
    expect((await job())?.attemptsMade).toBe(0);
    expect(await gauge(h)).toBe(0);
  }, 60_000);
});
