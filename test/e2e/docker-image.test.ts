/**
 * The Docker image, built as `docker build .` would build it, without a Docker engine: the
 * Dockerfile is replayed (test/support/docker-replay.ts) on what .dockerignore lets in from the
 * working tree, then the image's entrypoint runs. A step that would fail in Docker fails here.
 * The slowest test: two `npm ci` (from the local npm cache) and a build.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hostPath, replayDockerfile, runInStage, type Stage } from '../support/docker-replay.js';

const root = fileURLToPath(new URL('../../', import.meta.url));
const workspace = mkdtempSync(join(tmpdir(), 'perks-image-'));
afterAll(() => rmSync(workspace, { recursive: true, force: true }));

function npmCache(): string {
  const result = spawnSync('npm', ['config', 'get', 'cache'], { encoding: 'utf8' });
  return result.stdout.trim() || join(process.env.HOME ?? '', '.npm');
}

let image: Stage;
const timings: string[] = [];

beforeAll(async () => {
  let step = '';
  let since = Date.now();
  const stages = await replayDockerfile({
    context: root,
    workspace,
    npmCache: npmCache(),
    onStep(next) {
      if (step) timings.push(`${((Date.now() - since) / 1000).toFixed(1)} s  ${step}`);
      [step, since] = [next, Date.now()];
    },
  });
  timings.push(`${((Date.now() - since) / 1000).toFixed(1)} s  ${step}`);
  console.log(`docker build replayed:\n${timings.join('\n')}`);
  const last = stages.at(-1);
  if (!last) throw new Error('the Dockerfile has no stage');
  image = last;
}, 240_000);

describe('the Docker image', () => {
  it('starts: its entrypoint answers --help, and `work --help` loads the worker', async () => {
    const help = await runInStage(image, [...image.entrypoint, '--help']);
    expect(help.stderr).toBe('');
    expect(help.status).toBe(0);
    expect(help.stdout).toMatch(/^Usage: perks-worker <command>/);
    // `--help` alone loads no command; `work` imports the worker's whole dependency tree.
    const work = await runInStage(image, [...image.entrypoint, 'work', '--help']);
    expect(work.stderr).toBe('');
    expect(work.status).toBe(0);
    expect(image.cmd).toEqual(['work']);
  });

  it('holds the compiled src, its production dependencies and nothing else', () => {
    expect(readdirSync(hostPath(image)).sort()).toEqual([
      'dist',
      'node_modules',
      'package-lock.json',
      'package.json',
    ]);
    expect(readdirSync(hostPath(image, 'dist'))).toEqual(['src']);
    expect(existsSync(hostPath(image, 'dist/src/store/migrations/000001_init.sql'))).toBe(true);
    const lock = JSON.parse(readFileSync(join(root, 'package-lock.json'), 'utf8')) as {
      packages: Record<string, { dev?: boolean }>;
    };
    const devOnly = Object.entries(lock.packages).filter(([, entry]) => entry.dev === true);
    expect(devOnly.length).toBeGreaterThan(0);
    const present = devOnly
      .map(([path]) => path)
      .filter((path) => existsSync(hostPath(image, path)));
    expect(present).toEqual([]);
    expect(existsSync(hostPath(image, 'node_modules/bullmq/package.json'))).toBe(true);
  });

  it('runs as a user that is not root', () => {
    expect(image.user).not.toBe('');
    expect(image.user.split(':')[0]).not.toMatch(/^(root|0)$/);
    expect(image.env.NODE_ENV).toBe('production');
  });

  it('has a HEALTHCHECK on /healthz of PORT, failing while it fails', async () => {
    const healthcheck = image.healthcheck;
    expect(healthcheck).toBeDefined();
    if (!healthcheck) return;
    const asked: string[] = [];
    let status = 200;
    const server = createServer((request, response) => {
      asked.push(request.url ?? '');
      response.writeHead(status).end();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = String((server.address() as AddressInfo).port);
    try {
      const check = async () => (await runInStage(image, healthcheck, { PORT: port })).status;
      expect(await check()).toBe(0);
      status = 503;
      expect(await check()).not.toBe(0);
      expect(asked).toEqual(['/healthz', '/healthz']);
    } finally {
      server.close();
    }
  });
});
