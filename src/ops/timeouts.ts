/** Bounded waits on servers that may have gone quiet (the timers never hold the process). */
import { setTimeout as sleep } from 'node:timers/promises';

/** Waits for `work` at most `ms` (a close needing a Redis gone at shutdown); false on timeout. */
export function within(ms: number, work: Promise<unknown>): Promise<boolean> {
  const done = work.then(() => true).catch(() => true);
  return Promise.race([done, sleep(ms, false, { ref: false })]);
}

/** Rejects with "no answer within N ms" when `promise` takes longer (a server gone quiet). */
export function withTimeout<T>(promise: Promise<T>, ms: number): Promise<T> {
  const late = sleep(ms, undefined, { ref: false }).then(() => {
    throw new Error(`no answer within ${ms} ms`);
  });
  return Promise.race([promise, late]);
}
