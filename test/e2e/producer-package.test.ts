/** The producer API as the client's services import it: `perks-worker/producer`. */
import { spawn, spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { testQueuePrefix } from '../support/redis.js';

const root = fileURLToPath(new URL('../../', import.meta.url));

const queues = testQueuePrefix();
const scratch = mkdtempSync(join(tmpdir(), 'perks-producer-'));
afterAll(async () => {
  await queues.cleanup();
  rmSync(scratch, { recursive: true, force: true });
});

/** Packages a service that only enqueues must not load: the worker's servers, HTTP and SQL. */
const serverSide =
  /^(express|fastify|undici|pg|pg-.+|pgpass|pino|pino-.+|prom-client|rabbitmq-client)$|^@(bull-board|opentelemetry)\//;

/**
 * Imports the producer in a child process and lists every module file it loads: ES modules
 * through a resolve hook, CommonJS ones (bullmq and ioredis load some) through Module._load
 * and require.cache.
 */
const loadCount = `
  import Module from 'node:module';
  import { receiveMessageOnPort } from 'node:worker_threads';
  const required = new Set();
  const load = Module._load;
  Module._load = function (request, parent, isMain) {
    const exported = load.apply(this, arguments);
    try { required.add(Module._resolveFilename(request, parent, isMain)); } catch {}
    return exported;
  };
  await import('perks-worker/producer');
  const resolved = [];
  for (let m; (m = receiveMessageOnPort(globalThis.esmResolved)); ) resolved.push(m.message);
  console.log(JSON.stringify({ resolved, required: [...required, ...Object.keys(Module._cache)] }));
`;

const resolveHook = `
  import { register } from 'node:module';
  import { MessageChannel } from 'node:worker_threads';
  const { port1, port2 } = new MessageChannel();
  const hooks = 'let port; export function initialize(data) { port = data.port; }' +
    'export async function resolve(specifier, context, next) {' +
    '  const resolved = await next(specifier, context); port.postMessage(resolved.url); return resolved; }';
  register('data:text/javascript,' + encodeURIComponent(hooks), { data: { port: port2 }, transferList: [port2] });
  globalThis.esmResolved = port1;
`;

/** `.../node_modules/@scope/name/lib/x.js` -> `@scope/name`; a file of ours -> undefined. */
function packageOf(file: string): string | undefined {
  const at = file.lastIndexOf('/node_modules/');
  if (at < 0) return undefined;
  const [first = '', second = ''] = file.slice(at + '/node_modules/'.length).split('/');
  return first.startsWith('@') ? `${first}/${second}` : first;
}

/** Runs a command to its end without blocking this process (npm may take a minute). */
function run(command: string, args: string[], cwd: string, env: Record<string, string>) {
  return new Promise<{ status: number | null; output: string }>((resolve, reject) => {
    const child = spawn(command, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    const append = (chunk: Buffer) => {
      output = (output + chunk.toString()).slice(-8000);
    };
    child.stdout.on('data', append);
    child.stderr.on('data', append);
    child.on('error', reject);
    child.on('close', (status) => resolve({ status, output }));
  });
}

/** A git repository holding the working tree as `git add -A` would commit it. */
async function snapshotRepository(): Promise<string> {
  const repo = join(scratch, 'perks-worker.git');
  const listed = spawnSync(
    'git',
    ['ls-files', '-z', '--cached', '--others', '--exclude-standard'],
    {
      cwd: root,
      encoding: 'utf8',
    },
  );
  expect(listed.status).toBe(0);
  for (const file of listed.stdout.split('\0').filter(Boolean)) {
    mkdirSync(dirname(join(repo, file)), { recursive: true });
    // A tracked file deleted in the working tree is not part of it.
    try {
      copyFileSync(join(root, file), join(repo, file));
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    }
  }
  const env = { PATH: process.env.PATH ?? '', HOME: scratch };
  const git = (...args: string[]) => run('git', args, repo, env);
  expect((await git('init', '-q')).status).toBe(0);
  expect((await git('add', '-A')).status).toBe(0);
  const commit = await git(
    '-c',
    'user.email=t@t',
    '-c',
    'user.name=t',
    '-c',
    'commit.gpgsign=false',
    'commit',
    '-q',
    '-m',
    'snapshot',
  );
  expect(commit.status, commit.output).toBe(0);
  return repo;
}

describe('perks-worker/producer', () => {
  it('is importable by package name and enqueues a validated enrollment', () => {
    const { prefix } = queues;
    const script = `
      import { createProducer } from 'perks-worker/producer';
      const perks = await createProducer({ redisUrl: process.env.REDIS_URL, queuePrefix: '${prefix}' });
      const first = await perks.enqueueEnrollment({ userId: 'customer-1', extraConsents: ['TARGETING'] });
      const again = await perks.enqueueEnrollment({ userId: 'customer-1' });
      let refused = '';
      try { await perks.enqueueEnrollment({ userId: 42 }); } catch (e) { refused = e.message; }
      await perks.close();
      console.log(JSON.stringify({ first, again, refused }));
    `;
    const result = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
      cwd: root,
      env: { PATH: process.env.PATH ?? '', REDIS_URL: queues.redisUrl },
      encoding: 'utf8',
      timeout: 20_000,
    });
    expect(result.stderr).toBe('');
    const { first, again, refused } = JSON.parse(result.stdout);
    expect(first).toEqual({
      consumerId: 'customer-1',
      jobId: expect.stringMatching(/^enroll-customer-1-[0-9a-z]+$/),
      alreadyPending: false,
    });
    // The duplicate signup event is answered with the pending job, not a second one.
    expect(again).toEqual({ consumerId: 'customer-1', jobId: first.jobId, alreadyPending: true });
    expect(refused).toBe('invalid enrollment payload: userId: must be a string');
  });

  it('loads bullmq, ioredis and zod, and none of the worker-side packages', () => {
    const result = spawnSync(
      process.execPath,
      [
        '--import',
        `data:text/javascript,${encodeURIComponent(resolveHook)}`,
        '--input-type=module',
        '-e',
        loadCount,
      ],
      { cwd: root, env: { PATH: process.env.PATH ?? '' }, encoding: 'utf8', timeout: 20_000 },
    );
    expect(result.stderr).toBe('');
    const { resolved, required } = JSON.parse(result.stdout) as {
      resolved: string[];
      required: string[];
    };
    const files = new Set([
      ...resolved.filter((url) => url.startsWith('file:')).map((url) => fileURLToPath(url)),
      ...required.filter((path) => path.startsWith('/')),
    ]);
    const packages = [...new Set([...files].map(packageOf))].filter((name) => name !== undefined);
    const own = [...files].filter((file) => packageOf(file) === undefined);
    console.log(
      `perks-worker/producer loads ${files.size} modules: ${own.length} of its own, the rest from ${packages.length} packages: ${packages.sort().join(', ')}`,
    );
    expect(packages).toEqual(expect.arrayContaining(['bullmq', 'ioredis', 'zod']));
    expect(packages.filter((name) => serverSide.test(name))).toEqual([]);
    expect(own.filter((file) => !file.startsWith(join(root, 'dist/src/')))).toEqual([]);
  });

  it('installs from a git URL into an empty project (`prepare` builds it) and enqueues', async () => {
    const repo = await snapshotRepository();
    const project = join(scratch, 'signup-service');
    mkdirSync(project);
    writeFileSync(
      join(project, 'package.json'),
      JSON.stringify({ name: 'signup-service', private: true, type: 'module' }),
    );
    const npmEnv = {
      PATH: process.env.PATH ?? '',
      HOME: process.env.HOME ?? '',
      // The local npm cache: the install and the one `prepare` needs take no download when warm.
      npm_config_prefer_offline: 'true',
      npm_config_update_notifier: 'false',
    };
    const install = await run(
      'npm',
      ['install', '--no-audit', '--no-fund', `git+file://${repo}`],
      project,
      npmEnv,
    );
    expect(install.status, install.output).toBe(0);
    const installed = join(project, 'node_modules/perks-worker');
    expect(readdirSync(join(installed, 'dist'))).toEqual(['src']);

    const script = `
      import { createProducer } from 'perks-worker/producer';
      const perks = await createProducer({ redisUrl: process.env.REDIS_URL, queuePrefix: '${queues.prefix}' });
      console.log(JSON.stringify(await perks.enqueueEnrollment({ userId: 'customer-2' })));
      await perks.close();
    `;
    const enqueue = await run(process.execPath, ['--input-type=module', '-e', script], project, {
      PATH: process.env.PATH ?? '',
      REDIS_URL: queues.redisUrl,
    });
    expect(enqueue.status, enqueue.output).toBe(0);
    const enqueued = JSON.parse(enqueue.output) as { jobId: string; alreadyPending: boolean };
    expect(enqueued).toMatchObject({ consumerId: 'customer-2', alreadyPending: false });
    const redis = new Redis(queues.redisUrl, { maxRetriesPerRequest: 1 });
    try {
      const job = await redis.hget(`${queues.prefix}:enrollment:${enqueued.jobId}`, 'data');
      expect(JSON.parse(job ?? '{}')).toMatchObject({
        userId: 'customer-2',
        consumerId: 'customer-2',
      });
    } finally {
      redis.disconnect();
    }
  }, 360_000);
});
