import { expect, it } from 'vitest';
import { WorkerPauses } from '../../src/jobs/pauses.js';
import { asWorkers, fakeWorker } from '../support/fake-worker.js';

it('resumes a worker only once every outage holding it has ended', async () => {
  const [sync, reconcile] = [fakeWorker(), fakeWorker()];
  const pauses = new WorkerPauses();
  await pauses.hold('token mint', asWorkers(sync));
  await pauses.hold('postgres', asWorkers(sync, reconcile));
  await pauses.hold('postgres', asWorkers(sync, reconcile)); // the same outage again
  expect([sync.paused, reconcile.paused]).toEqual([true, true]);

  await pauses.release('token mint');
  expect([sync.paused, reconcile.paused]).toEqual([true, true]);
  await pauses.release('postgres');
  expect([sync.paused, reconcile.paused]).toEqual([false, false]);
  await pauses.release('postgres'); // ended already: nothing to resume
  expect([sync.paused, reconcile.paused]).toEqual([false, false]);
});
