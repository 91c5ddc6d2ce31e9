/**
 * `perks-worker enroll --file`, the built bin run as a user would: CSV and JSON Lines from a
 * file and from stdin, bad lines by number, duplicates once, a harmless rerun, `--wait` against
 * a running worker and the sandbox, and the progress display on a terminal and in a pipe.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it, onTestFinished } from 'vitest';
import { enrollmentJobId, jobNames } from '../../src/queues/names.js';
import { deletePrefix } from '../../src/redis/connection.js';
import {
  bin,
  type ProcessRig,
  runCli,
  startProcessRig,
  startWorkerProcess,
  waitFor,
} from '../support/processes.js';

let rig: ProcessRig;
let dir: string;

beforeAll(async () => {
  rig = await startProcessRig({ sandbox: { seed: 7 } });
  dir = mkdtempSync(join(tmpdir(), 'enroll-file-'));
});

afterAll(async () => {
  await rig?.close();
  rmSync(dir, { recursive: true, force: true });
});

// Each test starts from an empty enrollment queue (no job, no deduplication key).
beforeEach(() => rig.producer.queues.enrollment.obliterate({ force: true }));

/** The bin, asynchronously: the sandbox answering the worker lives in this process. */
const enroll = (args: string[], options: { input?: string; env?: Record<string, string> } = {}) =>
  runCli(['enroll', ...args], { ...rig.workerEnv(), ...options.env }, { input: options.input });

function file(name: string, text: string): string {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
}

async function enrollmentJobs(): Promise<number> {
  const counts = await rig.producer.queues.enrollment.getJobCounts();
  return Object.values(counts).reduce((sum, n) => sum + n, 0);
}

const csv = [
  'user_id,extra_consents,removed_consents',
  'csv_1,TARGETING;STATISTICS,',
  'csv_2,,WEB_ANALYTICS',
  ',TARGETING,', // line 4: empty user id
  'csv_1,,', // a duplicate
  'csv_3,NOT_A_CONSENT,', // line 6
  'csv_4,only two fields', // line 7
  '',
  '"csv_5","BASIC; TARGETING",""',
].join('\n');

describe('perks-worker enroll --file', () => {
  it('enqueues a CSV file, reports bad lines by number, counts duplicates once; exit 1', async () => {
    const run = await enroll(['--file', file('signups.csv', `\uFEFF${csv}\n`)]);
    expect(run.stderr).toContain('line 4: user_id: must not be empty\n');
    expect(run.stderr).toMatch(/^line 6: extra_consents\[0\]: Invalid option: expected one of /m);
    expect(run.stderr).toContain('line 7: expected 3 fields as in the header, got 2\n');
    expect(run.stdout).toBe('read 7 records: enqueued 3, already pending 0, duplicates 1, bad 3\n');
    expect(run.status).toBe(1);
    expect(await enrollmentJobs()).toBe(3);
    const jobs = await rig.producer.queues.enrollment.getJobs(['waiting']);
    const data = jobs.map((j) => j.data).sort((a, b) => a.consumerId.localeCompare(b.consumerId));
    expect(data[0]).toEqual({
      userId: 'csv_1',
      consumerId: 'csv_1',
      extraConsents: ['TARGETING', 'STATISTICS'],
    });
    expect(data[2]).toEqual({
      userId: 'csv_5',
      consumerId: 'csv_5',
      extraConsents: ['BASIC', 'TARGETING'],
    });
  });

  it('reads JSON Lines from stdin with --format jsonl; exit 0 when every line is good', async () => {
    const input = [
      '{"user_id": "jl_1", "extra_consents": ["TARGETING"]}',
      '{"user_id": "jl_2", "removed_consents": "WEB_ANALYTICS"}',
      '{"user_id": "jl_1"}',
    ].join('\n');
    const run = await enroll(['--file', '-', '--format', 'jsonl'], { input });
    expect(run.stderr).not.toMatch(/^line /m);
    expect(run.stdout).toBe('read 3 records: enqueued 2, already pending 0, duplicates 1, bad 0\n');
    expect(run.status).toBe(0);
    expect(await enrollmentJobs()).toBe(2);
  });

  it('reads a .jsonl file and CSV from stdin, and names bad JSON lines', async () => {
    const jsonl = file(
      'signups.jsonl',
      '{"user_id":"f_1"}\n{"user_id": 42}\n{nope\n["f_2"]\n{"user_id":"f_3","consent":[]}\n',
    );
    const fromFile = await enroll(['--file', jsonl]);
    expect(fromFile.stderr).toContain('line 2: user_id: must be a string\n');
    expect(fromFile.stderr).toMatch(/^line 3: not valid JSON \(/m);
    expect(fromFile.stderr).toContain('line 4: must be a JSON object with a user_id\n');
    expect(fromFile.stderr).toContain('line 5: consent: is not a known field');
    expect(fromFile.stdout).toBe(
      'read 5 records: enqueued 1, already pending 0, duplicates 0, bad 4\n',
    );

    const fromStdin = await enroll(['--file', '-', '--format', 'csv'], {
      input: 'user_id\ns_1\ns_2\n',
    });
    expect(fromStdin.stdout).toBe(
      'read 2 records: enqueued 2, already pending 0, duplicates 0, bad 0\n',
    );
    // Without --format, an input that starts with `{` is JSON Lines, any other CSV.
    const sniffed = await enroll(['--file', '-'], { input: '\n {"user_id":"s_3"}\n' });
    expect(sniffed.stdout).toBe(
      'read 1 record: enqueued 1, already pending 0, duplicates 0, bad 0\n',
    );
    const sniffedCsv = await enroll(['--file', file('list.txt', 'user_id\ns_4\n')]);
    expect(sniffedCsv.stdout).toBe(
      'read 1 record: enqueued 1, already pending 0, duplicates 0, bad 0\n',
    );
    expect(await enrollmentJobs()).toBe(5);
  });

  it('refuses what it cannot read in one line, exit 2', async () => {
    const badFormat = await enroll(['--file', '-', '--format', 'xlsx']);
    expect(badFormat.stderr).toBe(
      'perks-worker: enroll: --format must be csv or jsonl, got "xlsx"\n',
    );
    expect(badFormat.status).toBe(2);
    const header = await enroll(['--file', file('bad-header.csv', 'id,extra_consents\na1,\n')]);
    expect(header.stderr).toBe(
      'perks-worker: enroll: line 1: the CSV header must name a user_id column (got "id", "extra_consents")\n',
    );
    expect(header.status).toBe(2);
    const missing = await enroll(['--file', join(dir, 'nope.csv')]);
    expect(missing.stderr).toMatch(/^perks-worker: enroll: cannot read --file .*nope\.csv: ENOENT/);
    expect(missing.status).toBe(2);
    expect(await enrollmentJobs()).toBe(0);
  });

  it('warns of a weak PERKS_CONSUMER_ID_KEY, one user or a file', async () => {
    const env = { PERKS_CONSUMER_ID_KEY: 'short' };
    const warning =
      'perks-worker: warning: PERKS_CONSUMER_ID_KEY is 5 characters long; use at least 16 random characters (and never change it once used)\n';
    const one = await enroll(['weak-key@example.com'], { env });
    expect(one.stderr).toBe(warning);
    expect(one.status).toBe(0);
    const many = await enroll(['--file', file('weak.csv', 'user_id\nweak-file@example.com\n')], {
      env,
    });
    expect(many.stderr.startsWith(warning)).toBe(true);
    expect(many.status).toBe(0);
  });

  it('calls an input with no record an error in one line, exit 1', async () => {
    for (const [name, text] of [
      ['empty.csv', ''],
      ['header-only.csv', 'user_id,extra_consents\n'],
      ['blank.jsonl', '\n\n'],
    ] as const) {
      const run = await enroll(['--file', file(name, text)]);
      expect(run.stderr).toBe(
        `perks-worker: enroll: ${join(dir, name)} holds no records (empty, or a header alone)\n`,
      );
      expect(run.stdout).toBe('');
      expect(run.status).toBe(1);
    }
    expect(await enrollmentJobs()).toBe(0);
  });

  it('a rerun (after an interruption) adds no second job for a pending enrollment', async () => {
    const path = file('rerun.csv', 'user_id\nrr_1\nrr_2\nrr_3\n');
    const first = await enroll(['--file', path]);
    expect(first.stdout).toBe(
      'read 3 records: enqueued 3, already pending 0, duplicates 0, bad 0\n',
    );
    const again = await enroll([
      '--file',
      file('rerun-more.csv', 'user_id\nrr_1\nrr_2\nrr_3\nrr_4\n'),
    ]);
    expect(again.stdout).toBe(
      'read 4 records: enqueued 1, already pending 3, duplicates 0, bad 0\n',
    );
    expect(again.status).toBe(0);
    expect(await enrollmentJobs()).toBe(4);
  });

  it('--wait follows every job to its end: created, already enrolled, failed by reason', async () => {
    rig.sandbox.state.addConsumer('w_known', { rewards: 0 });
    rig.sandbox.faults.inject({
      route: 'enroll',
      consumerId: 'w_broken',
      kind: 'status',
      status: 503,
      count: 100,
    });
    // A job no worker can ever run (as a client's producer of an older version might add it),
    // pending before the file names w_perm: the file's enrollment of it is that job.
    await rig.producer.queues.enrollment.add(
      jobNames.enroll,
      {
        userId: 'w_perm',
        consumerId: 'w_perm',
        extraConsents: ['BASIC'],
        removedConsents: ['BASIC'],
      },
      { jobId: enrollmentJobId('w_perm'), deduplication: { id: 'enroll-w_perm' } },
    );
    const ids = [
      'w_known',
      'w_broken',
      'w_perm',
      ...Array.from({ length: 40 }, (_, i) => `w_${i}`),
    ];
    const path = file('wait.csv', `user_id\n${ids.join('\n')}\n`);
    // JOB_ATTEMPTS is the enqueuer's: w_broken fails for good at its first 503.
    const env = { JOB_ATTEMPTS: '1' };
    // Queued before the worker starts: --wait then follows jobs that were pending already.
    const queued = await enroll(['--file', path], { env });
    expect(queued.stdout).toContain('enqueued 42,');
    const created = rig.sandbox.state.counters().enrollmentsCreated;
    const worker = startWorkerProcess(rig.workerEnv());
    try {
      const run = await enroll(['--file', path, '--wait'], { env });
      expect(run.stdout).toContain('read 43 records: enqueued 0, already pending 43,');
      expect(run.stdout).toContain(
        'followed 43 enrollments: created 40, already enrolled 1, failed 2\nfailed 2, by reason:\n',
      );
      expect(run.stdout).toContain(
        '  1  invalid enrollment payload: removedConsents: BASIC is also an extra consent\n',
      );
      // Only the 503 is offered for retry: the payload would fail again.
      expect(run.stdout).toContain(
        "1 failed permanently: retrying cannot help (fix the cause, enroll again)\nthe other 1 is listed by 'perks-worker failed' and can be retried there\n",
      );
      expect(run.status).toBe(1);
      expect(rig.sandbox.state.counters().enrollmentsCreated).toBe(created + 40);

      // A rerun once they have ended: new jobs, answered 409, no second consumer upstream.
      const again = file('wait-again.csv', 'user_id\nw_broken\nw_0\nw_1\nw_known\n');
      const rerun = await enroll(['--file', again, '--wait'], { env });
      expect(rerun.stdout).toContain('read 4 records: enqueued 4, already pending 0,');
      expect(rerun.stdout).toContain(
        'followed 4 enrollments: created 0, already enrolled 3, failed 1\n',
      );
      expect(rerun.status).toBe(1);
      expect(rig.sandbox.state.counters().enrollmentsCreated).toBe(created + 40);
    } finally {
      await worker.stop();
    }
  }, 60_000);

  it('shows a bar with rate and ETA on a terminal, plain lines in a pipe', async () => {
    const lines = Array.from({ length: 3000 }, (_, i) => `tty_${i}`);
    const path = file('tty.csv', `user_id\n${lines.join('\n')}\n`);
    const env = Object.entries(rig.workerEnv())
      .map(([k, v]) => `${k}='${v}'`)
      .join(' ');
    const tty = await new Promise<string>((resolve, reject) => {
      const child = spawn(
        'script',
        ['-qfc', `env ${env} '${process.execPath}' '${bin}' enroll --file '${path}'`, '/dev/null'],
        { stdio: ['ignore', 'pipe', 'pipe'] },
      );
      let out = '';
      child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
      child.on('error', reject);
      child.on('close', () => resolve(out));
    });
    // Records are counted, not lines: the header is none.
    expect(tty).toMatch(/enqueueing \[=+-*\] \d+% \| 3000\/3000 \| \d+\/s \| ETA \d+s \| /);
    expect(tty).toContain('read 3000 records: enqueued 3000');

    await rig.producer.queues.enrollment.obliterate({ force: true });
    const piped = await enroll(['--file', path]);
    expect(piped.stderr).not.toContain('[=');
    expect(piped.stderr).toMatch(
      /^enqueueing: 3000\/3000 \(100%\), \d+\/s, [\d.]+ s; enqueued 3000,/m,
    );
  });

  it('--wait with no worker running says so, and on Ctrl-C that none has started them', async () => {
    // A prefix no worker serves.
    const idlePrefix = `${rig.queues.prefix}-idle`;
    onTestFinished(() => deletePrefix(rig.producer.connection, idlePrefix));
    const path = file('idle.csv', 'user_id\nidle_1\nidle_2\n');
    const child = spawn(process.execPath, [bin, 'enroll', '--file', path, '--wait'], {
      env: { PATH: process.env.PATH ?? '', ...rig.workerEnv(), QUEUE_PREFIX: idlePrefix },
    });
    let [stdout, stderr] = ['', ''];
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('close', resolve));
    await waitFor('the hint', () => (stderr.includes('following: 0/2') ? true : undefined), 20_000);
    expect(stderr).toMatch(
      /^following: 0\/2 \(0%\), .*; waiting for a worker to start them \(is perks-worker work running\?\)$/m,
    );
    child.kill('SIGINT');
    expect(await exited).toBe(130);
    expect(stdout).toContain(
      'stopped following: 0 of 2 enrollments ended (created 0, already enrolled 0, failed 0), 2 still pending; no worker has started one: they wait for perks-worker work\n',
    );
  }, 30_000);
});
