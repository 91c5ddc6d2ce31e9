/**
 * A sandbox on its own thread (sandbox-thread.ts), and its state reached by message: each
 * call of `state` returns a promise of what the sandbox's SandboxState method returns.
 */
import { Worker } from 'node:worker_threads';
import type { SandboxOptions, SandboxState } from '../src/sandbox/index.js';
import type { StateCall, ThreadMessage } from './sandbox-thread.js';

type Remote<T> = {
  [K in keyof T]: T[K] extends (...args: infer A) => infer R ? (...args: A) => Promise<R> : never;
};

export interface RemoteSandbox {
  baseUrl: string;
  clientId: string;
  clientSecret: string;
  state: Remote<SandboxState>;
  close(): Promise<void>;
}

export async function startRemoteSandbox(options: SandboxOptions): Promise<RemoteSandbox> {
  const thread = new Worker(new URL('./sandbox-thread.js', import.meta.url), {
    workerData: options,
  });
  const pending = new Map<number, { resolve(value: unknown): void; reject(e: Error): void }>();
  let nextId = 0;
  const started = new Promise<Extract<ThreadMessage, { kind: 'started' }>>((resolve, reject) => {
    thread.once('error', reject);
    thread.on('message', (message: ThreadMessage) => {
      if (message.kind === 'started') return resolve(message);
      const call = pending.get(message.id);
      pending.delete(message.id);
      if (message.kind === 'result') call?.resolve(message.value);
      else call?.reject(new Error(`sandbox thread: ${message.message}`));
    });
  });
  thread.on('error', (error) => {
    for (const call of pending.values()) call.reject(error);
    pending.clear();
  });
  const { baseUrl, clientId, clientSecret } = await started;
  const state = new Proxy({} as Remote<SandboxState>, {
    get:
      (_target, method: string) =>
      (...args: unknown[]) =>
        new Promise((resolve, reject) => {
          const id = nextId++;
          pending.set(id, { resolve, reject });
          thread.postMessage({ id, method, args } as StateCall);
        }),
  });
  return {
    baseUrl,
    clientId,
    clientSecret,
    state,
    async close() {
      const exited = new Promise((resolve) => thread.once('exit', resolve));
      thread.postMessage('close');
      await exited;
    },
  };
}
