/**
 * `perks-worker status` while a 429 holds the API queues of every replica: it says so, and for
 * how long, rather than showing jobs waiting with no reason.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { pauseApiQueues } from '../../src/jobs/failures.js';
import { type ProcessRig, runCli, startProcessRig } from '../support/processes.js';

let rig: ProcessRig;
beforeAll(async () => {
  rig = await startProcessRig({ sandbox: { seed: 17 } });
});
afterAll(async () => rig?.close());

it('says the API queues are held by a 429, until when; a PERKS_RATE_LIMIT_PER_SECOND window is no hold', async () => {
  const env = rig.workerEnv();
  const { queues } = rig.producer;
  await rig.producer.enqueueRewardSync({ consumerId: 'held_1' });
  // A limiter window's count (a job taken under PERKS_RATE_LIMIT_PER_SECOND) is no hold.
  await rig.producer.connection.set(queues.rewardSync.keys.limiter ?? '', 3, 'PX', 60_000);
  expect((await runCli(['status'], env)).stdout).not.toContain('THROTTLED');

  await pauseApiQueues(queues, 30 * 60_000);
  const shown = await runCli(['status'], env);
  expect(shown.stdout.split('\n')[0]).toMatch(
    /^perks api: THROTTLED \(429\): the enrollment and reward-sync queues of every replica are held for another 1[78]\d\d s \(until \S+Z\); their jobs wait, no attempt spent$/,
  );
  const json = JSON.parse((await runCli(['status', '--json'], env)).stdout) as {
    perksApi: { heldUntil: string | null };
  };
  expect(Date.parse(json.perksApi.heldUntil ?? '') - Date.now()).toBeGreaterThan(25 * 60_000);
}, 60_000);
