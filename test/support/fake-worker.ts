import type { Worker } from 'bullmq';

/** A BullMQ worker as the outages see it: it says whether it is paused now. */
export function fakeWorker() {
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

export const asWorkers = (...workers: ReturnType<typeof fakeWorker>[]) =>
  workers as unknown as Worker[];
