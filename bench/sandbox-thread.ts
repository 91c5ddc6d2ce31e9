/**
 * The bench's sandbox runs on its own thread: the Perks API is another machine in
 * production, so its CPU must not queue behind the worker's event loop. (The 2 cores are
 * still shared, as they are with Redis and Postgres.) The main thread reaches the
 * sandbox's state through a small message RPC: see remote-sandbox.ts.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { type SandboxOptions, type SandboxState, startSandbox } from '../src/sandbox/index.js';

export type StateCall = {
  [K in keyof SandboxState]: SandboxState[K] extends (...args: never[]) => unknown
    ? { id: number; method: K; args: Parameters<SandboxState[K]> }
    : never;
}[keyof SandboxState];

export type ThreadMessage =
  | { kind: 'started'; baseUrl: string; clientId: string; clientSecret: string }
  | { kind: 'result'; id: number; value: unknown }
  | { kind: 'error'; id: number; message: string };

const port = parentPort;
if (!port) throw new Error('sandbox-thread.js runs as a worker thread');
const sandbox = await startSandbox(workerData as SandboxOptions);
const post = (message: ThreadMessage) => port.postMessage(message);

port.on('message', async (message: StateCall | 'close') => {
  if (message === 'close') {
    await sandbox.close();
    port.close();
    return;
  }
  try {
    const method = sandbox.state[message.method] as (...args: unknown[]) => unknown;
    post({ kind: 'result', id: message.id, value: method.apply(sandbox.state, message.args) });
  } catch (error) {
    post({ kind: 'error', id: message.id, message: (error as Error).message });
  }
});
post({
  kind: 'started',
  baseUrl: sandbox.baseUrl,
  clientId: sandbox.clientId,
  clientSecret: sandbox.clientSecret,
});
