import type { Worker } from 'bullmq';
import { expect, it } from 'vitest';
import { WorkerPauses } from '../../src/jobs/pauses.js';

/** A worker that says whether it is paused now. */
function fakeWorker() {
  const worker = {
    paused: false,
    pause: async () => {
      worker.paused = true;
    },
    resume: () => {
      worker.paused = false;
    },
  };
  return worker;
}

it('resumes a worker only once every outage holding it has ended', async () => {
  const [sync, reconcile] = [fakeWorker(), fakeWorker()];
  const pauses = new WorkerPauses();
  const workers = (...w: ReturnType<typeof fakeWorker>[]) => w as unknown as Worker[];
  await pauses.hold('token mint', workers(sync));
  await pauses.hold('postgres', workers(sync, reconcile));
  await pauses.hold('postgres', workers(sync, reconcile)); // the same outage again
  expect([sync.paused, reconcile.paused]).toEqual([true, true]);

  await pauses.release('token mint');
  expect([sync.paused, reconcile.paused]).toEqual([true, true]);
  await pauses.release('postgres');
  expect([sync.paused, reconcile.paused]).toEqual([false, false]);
  await pauses.release('postgres'); // ended already: nothing to resume
  expect([sync.paused, reconcile.paused]).toEqual([false, false]);
});
