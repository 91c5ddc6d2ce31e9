/**
 * The feed's retention and the webhooks queue, seen from outside, on `work` processes: two
 * replicas started together prune the events past EVENT_RETENTION_DAYS once, within a minute;
 * `events` shows the retention and, without webhooks, calls nothing pending; the webhooks queue
 * is in `status`, `/metrics` and `failed` like the others.
 */
import { Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jobNames, queueNames } from '../../src/queues/names.js';
import {
  type ProcessRig,
  runCli,
  startProcessRig,
  startWorkerProcess,
  type WorkerProcess,
  waitFor,
} from '../support/processes.js';

let rig: ProcessRig;
let env: Record<string, string>;
const workers: WorkerProcess[] = [];

const count = async (where: string) => {
  const sql = `select count(*)::int as n from perks.reward_events where ${where}`;
  return (await rig.store.pool.query<{ n: number }>(sql)).rows[0]?.n;
};

beforeAll(async () => {
  rig = await startProcessRig({ sandbox: { seed: 38 } });
  // Recent events first: old ones written after them (by hand) are reached all the same.
  await rig.store.pool.query(
    `insert into perks.reward_event_log (type, consumer_id, reward_id, data, created_at)
     select 'reward.created', 'ret_' || (g % 7), gen_random_uuid(), '{}',
            now() - case when g <= 50 then interval '1 hour' else interval '40 days' end
       from generate_series(1, 550) g`,
  );
  env = rig.workerEnv();
  // WEBHOOK_URL unset (webhooks off), EVENT_RETENTION_DAYS at its default (30).
  workers.push(startWorkerProcess(env), startWorkerProcess(env));
}, 30_000);

afterAll(async () => {
  await Promise.all(workers.map((w) => w.stop()));
  await rig?.close();
});

describe('event retention', () => {
  it('prunes the events past 30 days once, within a minute of two replicas starting', async () => {
    await waitFor(
      'old events pruned',
      async () => ((await count('true')) === 50 ? true : undefined),
      60_000,
      500,
    );
    expect(await count("created_at > now() - interval '1 day'")).toBe(50);
    const queue = rig.producer.queues.reconciliation;
    await waitFor('the pruning job to complete', async () => {
      const done = await queue.getJobs(['completed']);
      return done.some((job) => job.name === jobNames.pruneEvents) ? true : undefined;
    });
    const runs = (await queue.getJobs(['completed', 'active', 'wait'])).filter(
      (job) => job.name === jobNames.pruneEvents,
    );
    expect(runs.map((job) => job.returnvalue?.deleted)).toEqual([500]);
    const logged = workers.flatMap((w) =>
      w
        .output()
        .split('\n')
        .filter((line) => line.includes('"msg":"reward events pruned"')),
    );
    expect(logged).toHaveLength(1);
    expect(JSON.parse(logged[0] ?? '{}')).toMatchObject({ deleted: 500, retentionDays: 30 });
    // The next run is the hourly scheduler's, an hour away.
    const next = (await queue.getJobs(['delayed'])).filter((j) => j.name === jobNames.pruneEvents);
    expect(next.map((job) => job.delay)).toEqual([expect.any(Number)]);
    expect(next[0]?.delay).toBeGreaterThan(59 * 60_000);
  }, 90_000);

  it('prunes again when a replica starts after that run', async () => {
    await rig.store.pool.query(
      `insert into perks.reward_event_log (type, consumer_id, reward_id, data, created_at)
       select 'reward.created', 'ret_late', gen_random_uuid(), '{}', now() - interval '40 days'
         from generate_series(1, 20)`,
    );
    const late = startWorkerProcess(env);
    workers.push(late);
    // Run by whichever replica took the job; its log line follows the delete's commit.
    const runs = () =>
      workers.flatMap((w) => w.output().match(/"deleted":20,.*"reward events pruned"/g) ?? []);
    await waitFor(
      'late events pruned',
      async () => (runs().length > 0 ? true : undefined),
      60_000,
      500,
    );
    expect(await count('true')).toBe(50);
    expect(runs()).toHaveLength(1);
  }, 90_000);

  it('events shows the retention and the oldest event kept, and calls nothing pending', async () => {
    const oldest = (
      await rig.store.pool.query<{ id: string; at: Date }>(
        'select id, created_at as at from perks.reward_events order by id limit 1',
      )
    ).rows[0];
    const { status, stdout } = await runCli(['events', '--limit', '3'], env);
    expect(status).toBe(0);
    expect(stdout).toContain(
      `retention: 30 days, oldest event kept: ${oldest?.at.toISOString()} (evt_${oldest?.id})`,
    );
    expect(stdout).not.toMatch(/pending/);
    expect(stdout.match(/ not sent$/gm)).toHaveLength(3);

    const replay = await runCli(['events', 'replay', '--from', '1'], env);
    expect(replay.status).toBe(1);
    expect(replay.stdout).toMatch(/^webhooks are not configured .*: nothing will be delivered/);
  });

  it('shows the webhooks queue in status, /metrics and failed', async () => {
    const status = JSON.parse((await runCli(['status', '--json'], env)).stdout) as {
      queues: Record<string, Record<string, number>>;
    };
    expect(Object.keys(status.queues).sort()).toEqual(
      ['enrollment', 'reconciliation', 'rewardSync', 'webhooks'].sort(),
    );
    expect(status.queues.webhooks).toMatchObject({ wait: 0, failed: 0 });

    const started = workers[0]
      ?.output()
      .split('\n')
      .find((l) => l.includes('"msg":"worker started"'));
    const { port } = JSON.parse(started ?? '{}') as { port: number };
    const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    expect(metrics).toMatch(/^perks_worker_queue_jobs\{queue="webhooks",state="waiting"\} 0$/m);

    // A delivery job failed for good is listed, and retried, like any other.
    const { queues } = rig.producer;
    const connection = new Redis(rig.queues.redisUrl, { maxRetriesPerRequest: null });
    const refusing = new Worker(
      queueNames.webhooks,
      async () => {
        throw new Error('the webhook receiver answered 410');
      },
      { connection, prefix: rig.queues.prefix },
    );
    try {
      await queues.webhooks.add('deliver-events', { consumerId: 'ret_1' }, { attempts: 1 });
      await waitFor('a failed delivery job', async () =>
        (await queues.webhooks.getFailedCount()) === 1 ? true : undefined,
      );
    } finally {
      await refusing.close();
      connection.disconnect();
    }
    const failed = JSON.parse((await runCli(['failed', '--json'], env)).stdout) as {
      jobs: { queue: string; consumer: string; reason: string }[];
    };
    expect(failed.jobs).toEqual([
      expect.objectContaining({
        queue: 'webhooks',
        consumer: 'ret_1',
        reason: 'the webhook receiver answered 410',
      }),
    ]);
  }, 60_000);
});
