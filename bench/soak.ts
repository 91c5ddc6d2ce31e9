/**
 * Soak run: `npm run soak -- --duration 30m`. Mixed load (enrollments, upstream changes and
 * syncs, reconciliations) against an in-process sandbox, worked by `perks-worker work`
 * replicas that reach Redis and PostgreSQL through TCP proxies, while faults are injected:
 * API storms, token revocations and token-endpoint outages, SIGKILLed and SIGTERMed replicas,
 * Redis and Postgres connections cut or down. At the end the load stops, every consumer is
 * synced once more, and the datastore is compared with the sandbox. Prints a report, then
 * one JSON line (`{"soak": ...}`). Exits 1 when data is lost or the observer's RSS grew.
 *
 * Off in CI. Needs REDIS_URL and DATABASE_URL (a user that may CREATE DATABASE); uses its
 * own database and queue prefix and removes both at the end. Run `npm run build:bench` first
 * (the npm script does).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { QueueEvents } from 'bullmq';
import pg from 'pg';
import { createProducer } from '../src/queues/producer.js';
import { sandboxApiEnv, startSandbox } from '../src/sandbox/index.js';
import { migrate } from '../src/store/migrate.js';
import { startTcpProxy, targetOf } from '../test/support/tcp-proxy.js';

const { values } = parseArgs({
  options: {
    duration: { type: 'string', default: '30m' },
    workers: { type: 'string', default: '3' },
    'fault-every': { type: 'string', default: '10s' },
    'sample-every': { type: 'string', default: '10s' },
    'keep-database': { type: 'boolean', default: false },
  },
});

function parseDuration(text: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(text.trim());
  if (!m) throw new Error(`--duration: "${text}" is not a duration (e.g. 30m, 180s, 1h)`);
  const unit = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[(m[2] ?? 'ms') as 'ms'];
  return Math.round(Number(m[1]) * unit);
}

const durationMs = parseDuration(values.duration);
const faultEveryMs = parseDuration(values['fault-every']);
const sampleEveryMs = parseDuration(values['sample-every']);
const workerCount = Math.max(2, Number(values.workers));
const redisUrl = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const adminUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const bin = fileURLToPath(new URL('../src/index.js', import.meta.url));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const pick = <T>(xs: readonly T[]): T | undefined => xs[Math.floor(Math.random() * xs.length)];
const log = (msg: string) => process.stderr.write(`[soak ${new Date().toISOString()}] ${msg}\n`);

const tag = `${process.pid}_${randomBytes(3).toString('hex')}`;
const dbName = `perks_soak_${tag}`;
const prefix = `soak_${tag}`;
const dbUrl = (() => {
  const u = new URL(adminUrl);
  u.pathname = `/${dbName}`;
  return u.toString();
})();

const admin = new pg.Client({ connectionString: adminUrl });
await admin.connect();
await admin.query(`create database ${dbName}`);
await migrate({ databaseUrl: dbUrl, schema: 'perks' });
const pool = new pg.Pool({ connectionString: dbUrl, max: 3 });
// Dropping the database at the end terminates idle connections: not a crash.
pool.on('error', () => {});

const sandbox = await startSandbox({ seed: 7, latencyMs: 10, tokenTtlSeconds: 120 });
const redisProxy = await startTcpProxy(targetOf(redisUrl));
const pgProxy = await startTcpProxy(targetOf(dbUrl));
const jobPolicy = {
  // Exponential: the 10th attempt waits 200 ms × 2^8 ≈ 51 s; all ten span about 100 s.
  jobAttempts: 10,
  jobBackoffMs: 200,
  keepCompletedJobs: 200,
  keepFailedJobs: 10_000,
};
const producer = await createProducer({ redisUrl, queuePrefix: prefix, jobPolicy });

// --- Worker replicas --------------------------------------------------------------------------

interface Replica {
  slot: number;
  child: ChildProcess;
  exited: Promise<void>;
  alive: boolean;
}
const replicas: Replica[] = [];

function startReplica(slot: number): Replica {
  const child = spawn(process.execPath, [bin, 'work'], {
    env: {
      PATH: process.env.PATH ?? '',
      ...sandboxApiEnv(sandbox),
      PERKS_TIMEOUT_MS: '2000',
      REDIS_URL: redisProxy.urlFor(redisUrl),
      QUEUE_PREFIX: prefix,
      DATABASE_URL: pgProxy.urlFor(dbUrl),
      DATABASE_POOL_SIZE: '4',
      ENROLL_CONCURRENCY: '4',
      SYNC_CONCURRENCY: '4',
      JOB_ATTEMPTS: String(jobPolicy.jobAttempts),
      JOB_BACKOFF_MS: String(jobPolicy.jobBackoffMs),
      KEEP_COMPLETED_JOBS: String(jobPolicy.keepCompletedJobs),
      JOB_LOCK_MS: '5000',
      SHUTDOWN_TIMEOUT_MS: '5000',
      PORT: '0',
      LOG_LEVEL: 'error',
    },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  child.stderr?.resume();
  const replica: Replica = { slot, child, alive: true, exited: Promise.resolve() };
  replica.exited = new Promise((resolve) =>
    child.on('exit', () => {
      replica.alive = false;
      resolve();
    }),
  );
  replicas[slot] = replica;
  return replica;
}
for (let slot = 0; slot < workerCount; slot++) startReplica(slot);

/** Replica 0 is never killed: its RSS is the series that must not grow. */
function rssKb(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    const m = /VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) : undefined;
  } catch {
    return undefined;
  }
}

// --- Counting jobs ----------------------------------------------------------------------------

const processed: Record<string, { completed: number; failed: number }> = {};
const events = (['enrollment', 'rewardSync', 'reconciliation'] as const).map((kind) => {
  const name = producer.queues[kind].name;
  processed[kind] = { completed: 0, failed: 0 };
  const qe = new QueueEvents(name, { connection: { url: redisUrl }, prefix });
  qe.on('completed', () => processed[kind] && processed[kind].completed++);
  qe.on('failed', () => processed[kind] && processed[kind].failed++);
  qe.on('error', () => {});
  return qe;
});

// --- Load -------------------------------------------------------------------------------------

const consumers: string[] = [];
let nextConsumer = 0;
let stopping = false;

async function loadTick(): Promise<void> {
  for (let i = 0; i < 3; i++) {
    const id = `soak_${String(nextConsumer++).padStart(6, '0')}`;
    sandbox.state.addConsumer(id, { enrolled: false, rewards: Math.floor(Math.random() * 1200) });
    consumers.push(id);
    await producer.enqueueEnrollment({ consumerId: id, extraConsents: ['BASIC'] });
  }
  for (let i = 0; i < 4; i++) {
    const id = pick(consumers);
    if (!id || !sandbox.state.isEnrolled(id)) continue;
    const rewards = sandbox.state.rewardsOf(id);
    const r = Math.random();
    if (r < 0.4 || rewards.length === 0)
      sandbox.state.addRewards(id, 1 + Math.floor(Math.random() * 50));
    else if (r < 0.8) {
      const target = pick(rewards.filter((x) => x.status === 'VALIDATED'));
      if (target)
        sandbox.state.setRewardStatus(id, target.id, pick(['PAID_IN', 'PAID_OUT']) ?? 'PAID_IN');
    } else {
      const gone = pick(rewards);
      if (gone) sandbox.state.removeReward(id, gone.id);
    }
    await producer.enqueueRewardSync({ consumerId: id, reason: 'manual' });
  }
}

// --- Faults -----------------------------------------------------------------------------------

const faults: Record<string, number> = {};
const count = (kind: string) => {
  faults[kind] = (faults[kind] ?? 0) + 1;
};
const apiFaults = [
  () => sandbox.faults.inject({ route: 'listRewards', count: 6, kind: 'status', status: 500 }),
  () => sandbox.faults.inject({ route: 'listRewards', count: 3, kind: 'html502' }),
  () => sandbox.faults.inject({ route: '*', count: 3, kind: 'empty', status: 503 }),
  () => sandbox.faults.inject({ route: '*', count: 2, kind: 'empty', status: 504 }),
  () => sandbox.faults.inject({ route: '*', count: 2, kind: 'throttle429', retryAfterSeconds: 2 }),
  () => sandbox.faults.inject({ route: '*', count: 3, kind: 'reset' }),
  () => sandbox.faults.inject({ route: 'listRewards', count: 2, kind: 'delay', delayMs: 3000 }),
  () => sandbox.faults.inject({ route: 'enroll', count: 2, kind: 'delay', delayMs: 3000 }),
  () => sandbox.faults.inject({ route: '*', count: 2, kind: 'malformed', body: 'not-json' }),
];

async function injectFault(): Promise<void> {
  const r = Math.random();
  if (r < 0.35) {
    (pick(apiFaults) ?? (() => {}))();
    count('api storm');
  } else if (r < 0.5) {
    const victim = replicas[1 + Math.floor(Math.random() * (workerCount - 1))];
    if (victim?.alive) {
      const signal = Math.random() < 0.7 ? 'SIGKILL' : 'SIGTERM';
      victim.child.kill(signal);
      await victim.exited;
      startReplica(victim.slot);
      count(`replica ${signal}`);
    }
  } else if (r < 0.6) {
    redisProxy.cut();
    count('redis cut');
  } else if (r < 0.67) {
    redisProxy.pause();
    await sleep(3000);
    redisProxy.resume();
    count('redis down 3 s');
  } else if (r < 0.77) {
    pgProxy.cut();
    count('postgres cut');
  } else if (r < 0.84) {
    pgProxy.pause();
    await sleep(3000);
    pgProxy.resume();
    count('postgres down 3 s');
  } else if (r < 0.92) {
    sandbox.state.revokeTokens();
    count('token revoked');
  } else {
    sandbox.faults.inject({ route: 'token', count: 1_000_000, kind: 'status', status: 503 });
    sandbox.state.revokeTokens();
    await sleep(5000);
    sandbox.faults.clear();
    count('token endpoint down 5 s');
  }
}

// --- Run --------------------------------------------------------------------------------------

const started = Date.now();
const rss: { atS: number; kb: number }[] = [];
log(`soak for ${durationMs / 1000} s, ${workerCount} replicas, db ${dbName}, prefix ${prefix}`);

const loadLoop = (async () => {
  while (!stopping) {
    await loadTick().catch((e: unknown) => log(`load tick failed: ${String(e)}`));
    await sleep(1000);
  }
})();
const faultLoop = (async () => {
  await sleep(faultEveryMs);
  while (!stopping) {
    await injectFault().catch((e: unknown) => log(`fault failed: ${String(e)}`));
    await sleep(faultEveryMs);
  }
})();
const reconcileLoop = (async () => {
  while (!stopping) {
    await sleep(120_000);
    if (!stopping) await producer.startReconciliation().catch(() => {});
  }
})();
const sampleLoop = (async () => {
  while (!stopping) {
    const kb = rssKb(replicas[0]?.child.pid);
    if (kb !== undefined) rss.push({ atS: Math.round((Date.now() - started) / 1000), kb });
    await sleep(sampleEveryMs);
  }
})();

await sleep(durationMs);
stopping = true;
log('load stopped; healing every fault and draining');
await Promise.all([loadLoop, faultLoop]);
sandbox.faults.clear();
redisProxy.resume();
pgProxy.resume();
for (const r of replicas) if (!r.alive) startReplica(r.slot);

async function drain(timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  let quiet = 0;
  let lastReport = Date.now();
  while (Date.now() < deadline) {
    let pending = 0;
    for (const q of Object.values(producer.queues)) {
      const c = await q.getJobCounts('wait', 'active', 'prioritized');
      pending += Object.values(c).reduce((a, b) => a + b, 0);
      // The reconciliation schedule's next run (a `repeat:` job) is always delayed.
      const delayed = await q.getJobs(['delayed']);
      pending += delayed.filter((j) => !j.id?.startsWith('repeat:')).length;
    }
    quiet = pending === 0 ? quiet + 1 : 0;
    if (Date.now() - lastReport > 10_000) {
      lastReport = Date.now();
      log(`draining: ${pending} jobs waiting, active or delayed`);
    }
    if (quiet >= 3) return true;
    await sleep(500);
  }
  return false;
}
const drained1 = await drain(300_000);
// The last upstream changes may postdate the last sync that started: sync everyone once more.
for (const id of consumers) {
  if (sandbox.state.isEnrolled(id)) await producer.enqueueRewardSync({ consumerId: id });
}
const drained2 = await drain(300_000);
await sampleLoop;
// reconcileLoop ends at its next wake-up; process.exit below does not wait for it.
void reconcileLoop;

// --- Consistency ------------------------------------------------------------------------------

const canonical = (amount: string) => {
  const negative = amount.startsWith('-');
  const [int = '', frac = ''] = amount.replace(/^[+-]/, '').split('.');
  const text = `${int.replace(/^0+(?=\d)/, '') || '0'}${frac ? `.${frac}` : ''}`;
  return negative && /[1-9]/.test(text) ? `-${text}` : text;
};
let mismatched = 0;
let notEnrolled = 0;
let rewardsChecked = 0;
const mismatchSamples: string[] = [];
for (const id of consumers) {
  if (!sandbox.state.isEnrolled(id)) {
    notEnrolled++;
    continue;
  }
  const upstream = sandbox.state
    .rewardsOf(id)
    .map((r) => `${r.id} ${canonical(r.amount)} ${r.status}`)
    .sort();
  const { rows } = await pool.query<{ line: string }>(
    `select id || ' ' || amount::text || ' ' || status as line from perks.rewards
      where consumer_id = $1 and missing_since is null order by id`,
    [id],
  );
  rewardsChecked += upstream.length;
  const stored = rows.map((r) => r.line);
  if (stored.join('\n') !== upstream.join('\n')) {
    mismatched++;
    if (mismatchSamples.length < 5)
      mismatchSamples.push(`${id}: stored ${stored.length}, upstream ${upstream.length}`);
  }
}
const counters = sandbox.state.counters();
const { rows: enrolledRows } = await pool.query<{ n: string }>(
  'select count(*) as n from perks.consumers where enrollment_outcome is not null',
);

const third = Math.max(1, Math.floor(rss.length / 3));
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] ?? 0;
};
// The first third is warm-up (heap and pools filling from a cold start): growth is judged
// between the middle third and the last third.
const firstMb = median(rss.slice(third, 2 * third).map((s) => s.kb)) / 1024;
const lastMb = median(rss.slice(-third).map((s) => s.kb)) / 1024;
const maxMb = Math.max(0, ...rss.map((s) => s.kb)) / 1024;
// "Must not grow": the last third's median within 20 % (and 16 MB) of the middle third's.
const rssGrew = rss.length >= 6 && lastMb > firstMb * 1.2 && lastMb - firstMb > 16;
const consistent = drained1 && drained2 && mismatched === 0 && notEnrolled === 0;

const report = {
  durationS: Math.round(durationMs / 1000),
  replicas: workerCount,
  consumers: consumers.length,
  rewardsChecked,
  jobs: processed,
  faults,
  faultsTotal: Object.values(faults).reduce((a, b) => a + b, 0),
  upstream: {
    enrollmentsCreated: counters.enrollmentsCreated,
    enrollmentsConflicted: counters.enrollmentsConflicted,
    requests: counters.requests,
    tokensMinted: counters.tokensMinted,
  },
  consistency: {
    drained: drained1 && drained2,
    consumersMismatched: mismatched,
    consumersNotEnrolledUpstream: notEnrolled,
    consumersRecordedEnrolled: Number(enrolledRows[0]?.n),
    enrolledTwiceUpstream: counters.enrollmentsCreated > consumers.length,
    samples: mismatchSamples,
    ok: consistent,
  },
  rssMb: {
    observerMiddleThirdMedian: Math.round(firstMb * 10) / 10,
    observerLastThirdMedian: Math.round(lastMb * 10) / 10,
    observerMax: Math.round(maxMb * 10) / 10,
    samples: rss.map((s) => [s.atS, Math.round(s.kb / 102.4) / 10]),
    grew: rssGrew,
  },
  ok: consistent && !rssGrew,
};

const lines = [
  `soak: ${report.durationS} s, ${workerCount} replicas, ${consumers.length} consumers, ${rewardsChecked} rewards checked`,
  `jobs processed: ${Object.entries(processed)
    .map(([k, v]) => `${k} ${v.completed} completed / ${v.failed} failed attempts`)
    .join(', ')}`,
  `faults injected (${report.faultsTotal}): ${Object.entries(faults)
    .map(([k, v]) => `${k} ×${v}`)
    .join(', ')}`,
  `consistency: ${consistent ? 'OK' : 'FAILED'} (mismatched ${mismatched}, not enrolled ${notEnrolled}, upstream enrollments ${counters.enrollmentsCreated} for ${consumers.length} consumers, drained ${drained1 && drained2})`,
  `observer RSS MB: middle-third median ${report.rssMb.observerMiddleThirdMedian}, last-third median ${report.rssMb.observerLastThirdMedian}, max ${report.rssMb.observerMax} -> ${rssGrew ? 'GREW' : 'flat'}`,
  `RSS over time (s: MB): ${report.rssMb.samples.map(([t, mb]) => `${t}:${mb}`).join(' ')}`,
];
process.stdout.write(`${lines.join('\n')}\n${JSON.stringify({ soak: report })}\n`);

// --- Teardown ---------------------------------------------------------------------------------

await Promise.all(
  replicas.map(async (r) => {
    if (r.alive) r.child.kill('SIGTERM');
    await Promise.race([r.exited, sleep(10_000)]);
    if (r.alive) r.child.kill('SIGKILL');
  }),
);
await Promise.all(events.map((e) => e.close()));
await producer.queues.enrollment.obliterate({ force: true }).catch(() => {});
await producer.queues.rewardSync.obliterate({ force: true }).catch(() => {});
await producer.queues.reconciliation.obliterate({ force: true }).catch(() => {});
await producer.close();
await pool.end();
await sandbox.close();
await redisProxy.close();
await pgProxy.close();
if (!values['keep-database']) await admin.query(`drop database if exists ${dbName} with (force)`);
await admin.end();
process.exit(report.ok ? 0 : 1);
