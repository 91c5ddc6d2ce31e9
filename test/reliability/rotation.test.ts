/**
 * Rotating the API client as the spec describes it (create a new client, switch traffic, delete
 * the old one), the credentials in files: the worker reads them again when the old client is
 * refused, or on SIGHUP, and no job fails.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { readMintFailures } from '../../src/jobs/mint-outage.js';
import { enqueueEnrollments } from '../../src/queues/producer.js';
import { credentialsName } from '../../src/redis/token-cache.js';
import type { Sandbox } from '../../src/sandbox/index.js';
import { startProcessRig, startWorkerProcess, waitFor } from '../support/processes.js';
import { type Harness, startHarness } from '../support/worker-harness.js';

type Client = { client_id: string; client_secret: string };
const clientA: Client = { client_id: 'client-a', client_secret: 'sk_sandbox_client_a' };

let cleanup: (() => Promise<unknown>) | undefined;
afterEach(async () => {
  await cleanup?.();
  cleanup = undefined;
});

/** The files an operator's secret store writes; `write` replaces both. */
function credentialFiles() {
  const dir = mkdtempSync(join(tmpdir(), 'perks-rotation-'));
  const id = join(dir, 'client_id');
  const secret = join(dir, 'client_secret');
  const write = (client: Client) => {
    writeFileSync(id, `${client.client_id}\n`);
    writeFileSync(secret, `${client.client_secret}\n`);
  };
  write(clientA);
  const env = { PERKS_CLIENT_ID_FILE: id, PERKS_CLIENT_SECRET_FILE: secret };
  return { write, env };
}

/** A `work` process reading its credentials (client A) from files, beside the rig's sandbox. */
async function fileCredentialsRig(seed: number) {
  const rig = await startProcessRig({
    sandbox: { seed, clientId: clientA.client_id, clientSecret: clientA.client_secret },
  });
  const files = credentialFiles();
  const worker = startWorkerProcess(
    rig.workerEnv({ PERKS_CLIENT_ID: '', PERKS_CLIENT_SECRET: '', ...files.env }),
  );
  return { rig, files, worker };
}

/** What an operator does in the administration console. */
async function control(sandbox: Sandbox, method: 'POST' | 'DELETE', path: string) {
  const answer = await fetch(`${sandbox.baseUrl}/_sandbox/${path}`, { method });
  expect(answer.ok).toBe(true);
  return method === 'POST' ? ((await answer.json()) as Client) : undefined;
}

async function rotationHarness(seed: number) {
  const files = credentialFiles();
  const h = await startHarness({
    sandbox: { seed, clientId: clientA.client_id, clientSecret: clientA.client_secret },
    env: { PERKS_CLIENT_ID: undefined, PERKS_CLIENT_SECRET: undefined, ...files.env },
  });
  cleanup = () => h.close();
  h.sandbox.state.setLatency(20); // jobs still flow when the rotation happens
  const ids = Array.from({ length: 60 }, (_, i) => `rot_${seed}_${i}`);
  await enqueueEnrollments(
    h.runtime.ctx.queues,
    ids.map((consumerId) => ({ consumerId })),
  );
  return { h, files, ids };
}

async function completedEnrollments(h: Harness) {
  return h.runtime.ctx.queues.enrollment.getCompletedCount();
}

/** Every consumer enrolled and synced, no job failed, and the worker mints as `client`. */
async function expectRotatedTo(h: Harness, ids: string[], client: Client) {
  await h.idle(60_000);
  const { enrollment, rewardSync } = h.runtime.ctx.queues;
  expect(await enrollment.getFailedCount()).toBe(0);
  expect(await rewardSync.getFailedCount()).toBe(0);
  expect(await enrollment.getCompletedCount()).toBe(ids.length);
  expect(await rewardSync.getCompletedCount()).toBe(ids.length);
  for (const id of ids) expect(h.sandbox.state.isEnrolled(id)).toBe(true);
  const name = credentialsName({
    baseUrl: h.config.perks.baseUrl,
    clientId: client.client_id,
    clientSecret: client.client_secret,
  });
  expect(await h.runtime.connection.exists(`${h.prefix}:perks:token:${name}`)).toBe(1);
  expect((await fetch(`${h.opsUrl}/readyz`)).status).toBe(200);
  expect(await readMintFailures(h.runtime.connection, h.prefix)).toEqual([]);
}

describe('rotating the API client', () => {
  it('new client written to the files, then the old one deleted mid-run: the refused mint reads the files again, no job fails', async () => {
    const { h, files, ids } = await rotationHarness(71);
    await waitFor('jobs flowing', async () =>
      (await completedEnrollments(h)) >= 5 ? true : undefined,
    );
    const clientB = (await control(h.sandbox, 'POST', 'clients')) as Client;
    files.write(clientB);
    await control(h.sandbox, 'DELETE', `clients/${clientA.client_id}`);
    // As if the old tokens had expired: the next call is a 401, the next mint is refused.
    h.sandbox.state.revokeTokens();
    expect(await completedEnrollments(h)).toBeLessThan(ids.length);

    await expectRotatedTo(h, ids, clientB);
  }, 90_000);

  it('the old client deleted before the files are written: API jobs wait, refused, then resume as the new client', async () => {
    const { h, files, ids } = await rotationHarness(72);
    await waitFor('jobs flowing', async () =>
      (await completedEnrollments(h)) >= 5 ? true : undefined,
    );
    await control(h.sandbox, 'DELETE', `clients/${clientA.client_id}`);
    h.sandbox.state.revokeTokens();
    // /readyz says so while it lasts (and a job's refused mint spends no attempt).
    const ready = await waitFor('readyz: refused', async () => {
      const answer = await fetch(`${h.opsUrl}/readyz`);
      return answer.status === 503 ? ((await answer.json()) as { status: string }) : undefined;
    });
    expect(ready.status).toBe('not ready: perks api: credentials refused (401 ERR-401-00)');
    const [failure] = await readMintFailures(h.runtime.connection, h.prefix);
    expect(failure).toMatchObject({ clientId: clientA.client_id, refused: true });
    expect(await completedEnrollments(h)).toBeLessThan(ids.length);

    const clientB = (await control(h.sandbox, 'POST', 'clients')) as Client;
    files.write(clientB);
    await expectRotatedTo(h, ids, clientB);
  }, 90_000);

  it('SIGHUP right after the start-up mint mints with what it read: a wrong new secret shows at once', async () => {
    const { rig, files, worker } = await fileCredentialsRig(91);
    cleanup = async () => {
      await worker.stop('SIGKILL');
      await rig.close();
    };
    const port = await waitFor('worker started', () => {
      const line = worker
        .output()
        .split('\n')
        .find((l) => l.includes('"worker started"'));
      return line ? (JSON.parse(line).port as number) : undefined;
    });
    const mintsBefore = rig.sandbox.state.counters().requests.token ?? 0;
    files.write({ ...clientA, client_secret: 'sk_sandbox_typo_in_new_secret' });
    worker.child.kill('SIGHUP');
    await waitFor('refused at once', async () => {
      const answer = await fetch(`http://127.0.0.1:${port}/readyz`);
      return answer.status === 503 ? true : undefined;
    });
    expect(rig.sandbox.state.counters().requests.token ?? 0).toBeGreaterThan(mintsBefore);
  }, 60_000);

  it('`work` reads the files again on SIGHUP, logs the new client id, and mints with it', async () => {
    const { rig, files, worker } = await fileCredentialsRig(73);
    const fixed = startWorkerProcess(rig.workerEnv());
    cleanup = async () => {
      await worker.stop('SIGKILL');
      await fixed.stop('SIGKILL');
      await rig.close();
    };
    for (const w of [worker, fixed]) {
      await waitFor('worker started', () =>
        w.output().includes('"worker started"') ? true : undefined,
      );
    }
    const clientB = (await control(rig.sandbox, 'POST', 'clients')) as Client;
    files.write(clientB);
    worker.child.kill('SIGHUP');
    fixed.child.kill('SIGHUP');

    const line = await waitFor('the new client id logged', () =>
      worker
        .output()
        .split('\n')
        .find((l) => l.includes('credentials read again') && l.includes(clientB.client_id)),
    );
    expect(JSON.parse(line)).toMatchObject({ why: 'SIGHUP', was: 'client-a', changed: true });
    expect(worker.output()).not.toContain(clientB.client_secret);
    await waitFor('the variables said unchangeable', () =>
      fixed.output().includes('credentials are variables') ? true : undefined,
    );
    expect(worker.alive() && fixed.alive()).toBe(true);

    // It mints as the new client: with the old one deleted, its jobs still complete.
    await fixed.stop();
    await control(rig.sandbox, 'DELETE', `clients/${clientA.client_id}`);
    rig.sandbox.state.revokeTokens();
    const [job] = await enqueueEnrollments(rig.producer.queues, [{ consumerId: 'rot_sighup' }]);
    await waitFor('the enrollment completed', async () =>
      (await rig.producer.queues.enrollment.getJobState(job?.jobId ?? '')) === 'completed'
        ? true
        : undefined,
    );
  }, 90_000);
});
