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
  // Once the thread is gone every call, waiting or future, fails instead of waiting forever.
  let gone: Error | undefined;
  const exited = new Promise<void>((resolve) => {
    thread.once('exit', (code) => {
      gone ??= new Error(`sandbox thread exited (code ${code})`);
      for (const call of pending.values()) call.reject(gone);
      pending.clear();
      resolve();
    });
  });
  thread.on('error', (error) => {
    gone ??= new Error(`sandbox thread failed: ${error.message}`);
  });
  const started = new Promise<Extract<ThreadMessage, { kind: 'started' }>>((resolve, reject) => {
    exited.then(() => reject(gone));
    thread.on('message', (message: ThreadMessage) => {
      if (message.kind === 'started') return resolve(message);
      const call = pending.get(message.id);
      pending.delete(message.id);
      if (message.kind === 'result') call?.resolve(message.value);
      else call?.reject(new Error(`sandbox thread: ${message.message}`));
    });
  });
  const { baseUrl, clientId, clientSecret } = await started;
  const call = (method: string, args: unknown[]) =>
    new Promise((resolve, reject) => {
      if (gone) return reject(gone);
      const id = nextId++;
      pending.set(id, { resolve, reject });
      thread.postMessage({ id, method, args } as StateCall);
    });
  const state = new Proxy({} as Remote<SandboxState>, {
    // Only method names: not `then` (await), nor symbols (inspection).
    get: (_target, method) =>
      typeof method === 'string' && method !== 'then'
        ? (...args: unknown[]) => call(method, args)
        : undefined,
  });
  return {
    baseUrl,
    clientId,
    clientSecret,
    state,
    async close() {
      if (!gone) thread.postMessage('close');
      const timer = setTimeout(() => void thread.terminate(), 5000);
      await exited;
      clearTimeout(timer);
    },
  };
}
