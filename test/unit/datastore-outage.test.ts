import { pino } from 'pino';
import { afterEach, beforeEach, expect, it, vi } from 'vitest';
import { DatastoreOutage } from '../../src/jobs/datastore-outage.js';
import { WorkerPauses } from '../../src/jobs/pauses.js';
import { asWorkers, fakeWorker } from '../support/fake-worker.js';

beforeEach(() => {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'Date', 'performance'] });
});
afterEach(() => {
  vi.useRealTimers();
});

function rig(ping: () => Promise<void>) {
  const worker = fakeWorker();
  const outage = new DatastoreOutage({
    ping,
    pauses: new WorkerPauses(),
    logger: pino({ level: 'silent' }),
  });
  outage.attach(asWorkers(worker));
  return { worker, outage };
}

const lost = new Error('Connection terminated unexpectedly');

it('a ping that answers: no outage, nothing paused', async () => {
  const { worker, outage } = rig(async () => {});
  expect(await outage.met(lost)).toBe(false);
  expect(worker.paused).toBe(false);
});

it('pings at the end of each pause, 1 s doubling, and resumes on the first answer', async () => {
  let up = false;
  const pings: number[] = [];
  const { worker, outage } = rig(async () => {
    pings.push(performance.now());
    if (!up) throw new Error('connect ECONNREFUSED 127.0.0.1:5432');
  });
  expect(await outage.met(lost)).toBe(true); // the ping confirming it is the first
  expect(worker.paused).toBe(true);
  expect(await outage.met(lost)).toBe(true); // during the pause: no ping
  for (const ms of [1000, 2000, 4000]) await vi.advanceTimersByTimeAsync(ms);
  expect(pings.length).toBe(4);
  expect(worker.paused).toBe(true);
  up = true;
  await vi.advanceTimersByTimeAsync(8000);
  expect(pings.length).toBe(5);
  expect(worker.paused).toBe(false);
  outage.close();
});

it('a wall clock stepped back during an outage skips no ping', async () => {
  let pings = 0;
  const { worker, outage } = rig(async () => {
    pings += 1;
    if (pings === 2) vi.setSystemTime(Date.now() - 60_000); // NTP steps the clock back
    if (pings < 4) throw new Error('connect ECONNREFUSED 127.0.0.1:5432');
  });
  expect(await outage.met(lost)).toBe(true);
  for (const ms of [1000, 2000, 4000]) await vi.advanceTimersByTimeAsync(ms);
  expect(pings).toBe(4);
  expect(worker.paused).toBe(false);
  outage.close();
});
