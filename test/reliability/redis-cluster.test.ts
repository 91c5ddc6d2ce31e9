/**
 * The built `work` on a real 3-master Redis Cluster (REDIS_CLUSTER_NODES, a hash-tagged
 * QUEUE_PREFIX): enrollment, sync, reconciliation, the shared token, the cron registration,
 * intake and webhooks all run on it; then the master holding the queues' slot is SIGKILLed
 * and restarted from its AOF. /readyz says so while it is away, and no job is lost.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { reconcileSchedulerId } from '../../src/queues/names.js';
import { credentialsName, RedisTokenCache } from '../../src/redis/token-cache.js';
import {
  bin,
  expectConsistent,
  type ProcessRig,
  sleep,
  startProcessRig,
  startWorkerProcess,
  storedRewards,
  upstreamRewards,
  type WorkerProcess,
  waitFor,
} from '../support/processes.js';
import { type RedisClusterRig, startRedisCluster } from '../support/redis-cluster.js';
import { startWebhookReceiver, type WebhookReceiver } from '../support/webhook-receiver.js';

const run = promisify(execFile);
const intakeToken = randomBytes(24).toString('hex');
const cron = '17 4 * * *';
const dashboardPassword = randomBytes(12).toString('hex');

let cluster: RedisClusterRig;
let rig: ProcessRig;
let receiver: WebhookReceiver;
let env: Record<string, string>;
let worker: WorkerProcess;
let opsPort: number;
/** The master a test killed, until it is restarted. */
let killed: number | undefined;

beforeAll(async () => {
  cluster = await startRedisCluster();
  receiver = await startWebhookReceiver();
  rig = await startProcessRig({
    sandbox: { seed: 101, latencyMs: 20, rewardsOnEnroll: 5 },
    clusterNodes: cluster.nodes,
  });
  env = rig.workerEnv({
    INTAKE_TOKEN: intakeToken,
    INTAKE_PORT: '0',
    INTAKE_HOST: '127.0.0.1',
    OUTBOX_POLL_MS: '200',
    WEBHOOK_URL: receiver.url,
    WEBHOOK_SECRET: receiver.secret,
    PERKS_RECONCILE_CRON: cron,
    DASHBOARD_PASSWORD: dashboardPassword,
    SYNC_CONCURRENCY: '4',
    JOB_LOCK_MS: '5000',
    JOB_BACKOFF_MS: '200',
    SHUTDOWN_TIMEOUT_MS: '3000',
  });
  worker = startWorkerProcess(env);
  opsPort = await waitFor('worker started', () => startLine(worker)?.port);
}, 60_000);

afterAll(async () => {
  try {
    // A test that failed mid-outage: the cleanup below needs every master.
    if (killed !== undefined) await cluster.restart(killed);
    await worker?.stop('SIGKILL');
    await rig?.close();
    await receiver?.close();
  } finally {
    await cluster?.stop();
  }
});

function startLine(w: WorkerProcess): { port: number; intake: { http: number } } | undefined {
  const line = w
    .output()
    .split('\n')
    .find((l) => l.includes('"worker started"'));
  return line ? JSON.parse(line) : undefined;
}

/** Every consumer's stored rewards equal the sandbox's. */
function allSynced(ids: readonly string[], timeoutMs = 30_000) {
  return waitFor(
    `${ids.length} consumers in step with the sandbox`,
    async () => {
      for (const id of ids) {
        const stored = await storedRewards(rig.store.pool, id);
        if (stored.join() !== upstreamRewards(rig.sandbox, id).join()) return undefined;
      }
      return true;
    },
    timeoutMs,
    200,
  );
}

function cli(command: string): Promise<{ stdout: string }> {
  return run(process.execPath, [bin, command], { env: { PATH: process.env.PATH ?? '', ...env } });
}

function postSignup(userId: string): Promise<Response> {
  return fetch(`http://127.0.0.1:${startLine(worker)?.intake.http}/v1/enrollments`, {
    method: 'POST',
    headers: { authorization: `Bearer ${intakeToken}`, 'content-type': 'application/json' },
    body: JSON.stringify([{ user_id: userId }]),
  });
}

async function readyz(): Promise<{ code: number; body: { status: string; checks: object } }> {
  const response = await fetch(`http://127.0.0.1:${opsPort}/readyz`);
  return {
    code: response.status,
    body: (await response.json()) as { status: string; checks: object },
  };
}

describe('work on a Redis Cluster', () => {
  it('enrolls, syncs and reconciles on the cluster, with one shared token and the cron registered', async () => {
    const ids = Array.from({ length: 20 }, (_, i) => `clu_${i}`);
    for (const id of ids) rig.sandbox.state.addConsumer(id, { enrolled: false, rewards: 8 });
    for (const consumerId of ids) await rig.producer.enqueueEnrollment({ consumerId });
    await allSynced(ids);
    expect(ids.every((id) => rig.sandbox.state.isEnrolled(id))).toBe(true);

    // A reconciliation started by the CLI on the cluster finds the rewards added since.
    for (const id of ids.slice(0, 5)) rig.sandbox.state.addRewards(id, 3);
    const { stdout } = await cli('reconcile');
    const jobId = /job (\S+)\)/.exec(stdout)?.[1] ?? '';
    expect(stdout).toContain('started reconciliation');
    await waitFor('the reconciliation completed', async () =>
      (await rig.producer.queues.reconciliation.getJob(jobId))?.finishedOn ? true : undefined,
    );
    await allSynced(ids);
    await expectConsistent(rig.store.pool, rig.sandbox, ids);
    expect(await rig.producer.queues.reconciliation.getJob(jobId)).toMatchObject({
      returnvalue: { enqueued: 20 },
    });

    // One token for the whole run, kept in the cluster where any replica finds it.
    expect(rig.sandbox.state.counters().tokensMinted).toBe(1);
    const shared = new RedisTokenCache({
      redis: rig.producer.connection,
      prefix: rig.queues.prefix,
      name: credentialsName(rig.sandbox),
    });
    expect((await shared.get())?.expiresAt).toBeGreaterThan(Date.now());

    // The cron was registered under its lock, which is released.
    const scheduler =
      await rig.producer.queues.reconciliation.getJobScheduler(reconcileSchedulerId);
    expect(scheduler).toMatchObject({ pattern: cron, tz: 'UTC' });
    expect(worker.output()).toContain('reconciliation schedule registered');
    const lock = `${rig.queues.prefix}:reconciliation:schedule-lock`;
    expect(await rig.producer.connection.exists(lock)).toBe(0);

    // Metrics read the queue counts from the cluster at each scrape.
    const metrics = await (await fetch(`http://127.0.0.1:${opsPort}/metrics`)).text();
    expect(metrics).toMatch(/perks_worker_queue_jobs\{[^}]*queue="reward-sync"[^}]*\} \d+/);

    // bull-board lists the queues, with their counts, from the cluster.
    const board = await fetch(`http://127.0.0.1:${opsPort}/dashboard/api/queues`, {
      headers: {
        authorization: `Basic ${Buffer.from(`admin:${dashboardPassword}`).toString('base64')}`,
      },
    });
    const { queues } = (await board.json()) as { queues: { name: string; counts: object }[] };
    expect(queues.map((q) => q.name).sort()).toEqual([
      'enrollment',
      'reconciliation',
      'reward-sync',
      'webhooks',
    ]);

    const status = await cli('status');
    expect(status.stdout).toContain(`queues (prefix ${rig.queues.prefix}; `);
  }, 60_000);

  it('takes signups over HTTP and from the outbox, and delivers every event as a webhook', async () => {
    expect((await postSignup('clu-http')).status).toBe(202);
    await rig.store.pool.query('select perks.enqueue_enrollment($1)', ['clu-outbox']);
    await allSynced(['clu-http', 'clu-outbox']);

    const { rows } = await rig.store.pool.query<{ n: number }>(
      'select count(*)::int as n from perks.reward_events',
    );
    const events = rows[0]?.n ?? 0;
    expect(events).toBeGreaterThan(100);
    await waitFor(
      `${events} events delivered`,
      () => (new Set(receiver.accepted.map((d) => d.id)).size >= events ? true : undefined),
      30_000,
      200,
    );
    expect(receiver.accepted.every((d) => d.valid)).toBe(true);
    const consumers = new Set(receiver.accepted.map((d) => d.body.data.consumer_id));
    expect(consumers).toContain('clu-http');
    expect(consumers).toContain('clu-outbox');
  }, 60_000);

  it('reports redis unreachable while the master of its slot is down, and loses no job', async () => {
    const ids = Array.from({ length: 60 }, (_, i) => `kill_${i}`);
    for (const id of ids) rig.sandbox.state.addConsumer(id, { rewards: 30 });
    // Slow answers: the kill lands with syncs running and most still waiting.
    rig.sandbox.state.setLatency(300);
    const jobIds: string[] = [];
    for (const consumerId of ids) {
      jobIds.push((await rig.producer.enqueueRewardSync({ consumerId })).jobId);
    }
    await waitFor('a first sync completed', async () =>
      (await rig.producer.queues.rewardSync.getCompletedCount()) > 0 ? true : undefined,
    );

    const master = await cluster.masterOf(rig.queues.prefix);
    killed = master;
    await cluster.kill(master);
    const down = await waitFor(
      '/readyz 503',
      async () => {
        const answer = await readyz();
        return answer.code === 503 ? answer.body : undefined;
      },
      15_000,
      200,
    );
    expect(down).toMatchObject({
      status: expect.stringContaining('redis unreachable'),
      checks: { redis: 'unreachable', postgres: 'ok' },
    });
    // A signup is refused at once, not taken and lost.
    expect((await postSignup('clu-during-outage')).status).toBe(503);
    await sleep(2000);
    expect(worker.alive(), worker.output()).toBe(true);

    await cluster.restart(master);
    killed = undefined;
    await waitFor('/readyz 200', async () => ((await readyz()).code === 200 ? true : undefined));
    await waitFor(
      `${jobIds.length} syncs completed`,
      async () => {
        const states = await Promise.all(
          jobIds.map(async (id) => (await rig.producer.queues.rewardSync.getJob(id))?.finishedOn),
        );
        return states.every(Boolean) ? true : undefined;
      },
      30_000,
      200,
    );
    await expectConsistent(rig.store.pool, rig.sandbox, ids);
    expect(await rig.producer.queues.rewardSync.getFailedCount()).toBe(0);
    expect(worker.output()).toContain('redis connection restored');
  }, 60_000);
});
