/**
 * A real 3-master Redis Cluster for tests, from the machine's `redis-server` and `redis-cli`:
 * each master on a free port (and its bus port, +10000) with its own directory in a temp dir,
 * `--appendonly yes` so a master killed and restarted on the same port and directory comes
 * back with its data and its slots. `stop()` kills every process and removes the directory.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { waitFor } from './processes.js';

const run = promisify(execFile);

export interface RedisClusterRig {
  /** `127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3`: the value of REDIS_CLUSTER_NODES. */
  nodesEnv: string;
  nodes: { host: string; port: number }[];
  /** The port of the master that holds `key`'s slot. */
  masterOf(key: string): Promise<number>;
  /** SIGKILLs the master on `port` (no shutdown save: the AOF is all it keeps). */
  kill(port: number): Promise<void>;
  /** Starts it again on the same port and directory, then waits for `cluster_state:ok`. */
  restart(port: number): Promise<void>;
  stop(): Promise<void>;
}

export interface RedisClusterOptions {
  /** cluster-node-timeout: how long a silent master takes to be marked failed. Default 2000. */
  nodeTimeoutMs?: number;
}

export async function startRedisCluster(
  options: RedisClusterOptions = {},
): Promise<RedisClusterRig> {
  const dir = mkdtempSync(join(tmpdir(), 'perks-redis-cluster-'));
  const ports = await freeClusterPorts(3);
  const processes = new Map<number, ChildProcess>();
  const start = (port: number) => {
    const nodeDir = join(dir, String(port));
    mkdirSync(nodeDir, { recursive: true });
    // `appendfsync always`: what a client was told is written is on disk before the kill.
    const args = [
      ...['--port', String(port), '--bind', '127.0.0.1', '--dir', nodeDir],
      ...['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf'],
      ...['--cluster-node-timeout', String(options.nodeTimeoutMs ?? 2000)],
      ...['--appendonly', 'yes', '--appendfsync', 'always', '--save', ''],
    ];
    const child = spawn('redis-server', args, { stdio: 'ignore' });
    processes.set(port, child);
  };
  const clusterOk = (port: number) =>
    waitFor(
      `cluster_state:ok on ${port}`,
      async () =>
        (await cli(port, 'cluster', 'info')).includes('cluster_state:ok') ? true : undefined,
      30_000,
      100,
    );
  const rig: RedisClusterRig = {
    nodesEnv: ports.map((port) => `127.0.0.1:${port}`).join(','),
    nodes: ports.map((port) => ({ host: '127.0.0.1', port })),
    async masterOf(key) {
      const slot = Number((await cli(ports[0] ?? 0, 'cluster', 'keyslot', key)).trim());
      const redis = new Redis({ port: ports[0], maxRetriesPerRequest: 1 });
      try {
        const ranges = await redis.cluster('SLOTS');
        const port = ranges.find(([from, to]) => slot >= from && slot <= to)?.[2]?.[1];
        if (port === undefined) throw new Error(`no master holds slot ${slot}`);
        return port;
      } finally {
        redis.disconnect();
      }
    },
    async kill(port) {
      const child = processes.get(port);
      if (!child || child.exitCode !== null) return;
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGKILL');
      await exited;
    },
    async restart(port) {
      start(port);
      for (const p of ports) await clusterOk(p);
    },
    async stop() {
      process.off('exit', killAll);
      for (const port of ports) await rig.kill(port);
      rmSync(dir, { recursive: true, force: true });
    },
  };
  // A test run that ends without `stop()` must not leave servers behind.
  const killAll = () => {
    for (const child of processes.values()) child.kill('SIGKILL');
  };
  process.once('exit', killAll);
  try {
    for (const port of ports) start(port);
    for (const port of ports) {
      await waitFor(`redis-server on ${port}`, async () =>
        (await cli(port, 'ping')).includes('PONG') ? true : undefined,
      );
    }
    await run('redis-cli', [
      '--cluster',
      'create',
      ...ports.map((port) => `127.0.0.1:${port}`),
      '--cluster-yes',
    ]);
    for (const port of ports) await clusterOk(port);
  } catch (error) {
    await rig.stop();
    throw error;
  }
  return rig;
}

async function cli(port: number, ...args: string[]): Promise<string> {
  const { stdout } = await run('redis-cli', ['-p', String(port), ...args]);
  return stdout;
}

/** `count` ports that are free, each with its cluster bus port (+10000) free too. */
async function freeClusterPorts(count: number): Promise<number[]> {
  const ports: number[] = [];
  while (ports.length < count) {
    const port = await freePort(0);
    if (port > 55_000 || ports.includes(port)) continue;
    if ((await freePort(port + 10_000).catch(() => 0)) === 0) continue;
    ports.push(port);
  }
  return ports;
}

function freePort(port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => resolve(typeof address === 'object' && address ? address.port : 0));
    });
  });
}
