/**
 * ThreadedPool: an undici Dispatcher whose connections live on a thread of their own
 * (http-thread-worker.mjs), for `request()` like any Pool.
 *
 * Why: the worker's main thread is busy most of the time (parsing pages, writing them, moving
 * jobs), and on it every connection waited twice per request for the event loop: to read the
 * response, then a full loop turn before undici writes the next request on the socket. On
 * its own thread a connection turns over at once; the main thread gets one message per
 * response (bench/RESULTS.md, round 14).
 *
 * What crosses: the request (method, path, headers, a string or bytes body, the timeouts)
 * and the whole response (status, headers, body bytes, transferred, not copied), or an error
 * as its name, code and message. A body over `maxResponseBytes` is cut just past it, so the
 * reader refuses it as it would a body read here. Aborting a request answers it here at once
 * and aborts it on the thread.
 *
 * The thread starts at the first request and does not keep the process alive while no request
 * is in flight (idle keep-alive sockets do not either). If it dies, its requests fail with
 * ERR_HTTP_THREAD_EXIT (a transport error: retried) and the next request starts a new one.
 */
import { Worker } from 'node:worker_threads';
import { Dispatcher, errors } from 'undici';

export interface ThreadedPoolOptions {
  /** Keep-alive connections of the thread's Pool. */
  connections: number;
  /** A body is read on the thread up to just past this many bytes. */
  maxResponseBytes: number;
}

/** The messages of http-thread-worker.mjs. */
interface ThreadRequest {
  method: string;
  path: string;
  headers: Dispatcher.DispatchOptions['headers'];
  body: string | Uint8Array | null;
  headersTimeout: number | null | undefined;
  bodyTimeout: number | null | undefined;
}

type ToThread =
  | { kind: 'request'; id: number; request: ThreadRequest }
  | { kind: 'abort'; id: number }
  | { kind: 'close' };

type FromThread =
  | {
      kind: 'response';
      id: number;
      status: number;
      statusText: string;
      rawHeaders: string[];
      body: ArrayBuffer;
    }
  | { kind: 'error'; id: number; error: { name: string; message: string; code?: string } }
  | { kind: 'closed' };

type Handler = Dispatcher.DispatchHandler;

const threadFile = new URL('./http-thread-worker.mjs', import.meta.url);

export class ThreadedPool extends Dispatcher {
  readonly #origin: string;
  readonly #options: ThreadedPoolOptions;
  #thread: Worker | undefined;
  readonly #pending = new Map<number, Handler>();
  #nextId = 0;
  #outbox: ToThread[] = [];
  #closed = false;
  #closing: Promise<void> | undefined;

  constructor(origin: string | URL, options: ThreadedPoolOptions) {
    super();
    this.#origin = new URL(origin).origin;
    this.#options = options;
  }

  override dispatch(options: Dispatcher.DispatchOptions, handler: Handler): boolean {
    let id: number | undefined;
    try {
      if (this.#closed) throw new errors.ClientClosedError();
      const origin = options.origin === undefined ? this.#origin : new URL(options.origin).origin;
      if (origin !== this.#origin) {
        throw new errors.InvalidArgumentError(`origin ${origin} is not this pool's`);
      }
      const body = options.body ?? null;
      if (body !== null && typeof body !== 'string' && !(body instanceof Uint8Array)) {
        throw new errors.InvalidArgumentError('body must be a string or bytes');
      }
      const request: ThreadRequest = {
        method: options.method,
        path: options.path,
        headers: options.headers ?? null,
        body,
        headersTimeout: options.headersTimeout,
        bodyTimeout: options.bodyTimeout,
      };
      id = this.#nextId++;
      this.#pending.set(id, handler);
      const sent = id;
      handler.onConnect?.((reason) => this.#abort(sent, reason));
      // Aborted while connecting (a signal already aborted): nothing to send.
      if (!this.#pending.has(id)) return true;
      const thread = this.#started();
      thread.ref();
      this.#post({ kind: 'request', id, request });
    } catch (error) {
      // Refused here, or not sendable (a header value that cannot cross to the thread).
      if (id !== undefined) this.#settled(id);
      handler.onError?.(error as Error);
    }
    return true;
  }

  /** Waits for the requests in flight, then stops the thread. */
  override close(): Promise<void>;
  override close(callback: () => void): void;
  override close(callback?: () => void): Promise<void> | undefined {
    this.#closed = true;
    this.#closing ??= this.#stop(false);
    if (!callback) return this.#closing;
    void this.#closing.then(callback);
    return undefined;
  }

  /** Fails the requests in flight and stops the thread at once. */
  override destroy(): Promise<void>;
  override destroy(err: Error | null): Promise<void>;
  override destroy(callback: () => void): void;
  override destroy(err: Error | null, callback: () => void): void;
  override destroy(
    errOrCallback?: Error | null | (() => void),
    callback?: () => void,
  ): Promise<void> | undefined {
    const err = typeof errOrCallback === 'function' ? null : errOrCallback;
    const done = typeof errOrCallback === 'function' ? errOrCallback : callback;
    this.#closed = true;
    this.#failAll(err ?? new errors.ClientDestroyedError());
    const stopped = this.#stop(true);
    if (!done) return stopped;
    void stopped.then(done);
    return undefined;
  }

  /** The running thread, if any (tests stop it to see requests fail over). */
  static threadOf(pool: ThreadedPool): Worker | undefined {
    return pool.#thread;
  }

  #started(): Worker {
    if (this.#thread) return this.#thread;
    const thread = new Worker(threadFile, {
      workerData: {
        origin: this.#origin,
        connections: this.#options.connections,
        maxResponseBytes: this.#options.maxResponseBytes,
      },
    });
    thread.on('message', (batch: FromThread[]) => {
      for (const message of batch) this.#onMessage(message);
    });
    // An 'error' (an exception on the thread) is followed by 'exit'; the listener keeps it
    // from being thrown on this thread.
    thread.on('error', () => undefined);
    thread.once('exit', (code) => {
      if (this.#thread === thread) {
        this.#thread = undefined;
        this.#outbox = []; // requests failed below, not to be sent to a new thread
      }
      const error = Object.assign(new Error(`the HTTP thread exited (code ${code})`), {
        code: 'ERR_HTTP_THREAD_EXIT',
      });
      this.#failAll(error);
    });
    this.#thread = thread;
    return thread;
  }

  /**
   * Messages to the thread go in batches: the requests of one run of this loop's microtasks
   * in one message (a message costs each thread more than its contents do).
   */
  #post(message: ToThread): void {
    if (this.#outbox.length === 0) queueMicrotask(() => this.#flush());
    this.#outbox.push(message);
  }

  #flush(): void {
    const batch = this.#outbox;
    this.#outbox = [];
    this.#thread?.postMessage(batch);
  }

  #onMessage(message: FromThread): void {
    if (message.kind === 'closed') return;
    const handler = this.#pending.get(message.id);
    if (!handler) return; // aborted here already
    this.#settled(message.id);
    if (message.kind === 'error') {
      const { name, message: text, code } = message.error;
      handler.onError?.(Object.assign(new Error(text), { name, ...(code ? { code } : {}) }));
      return;
    }
    const rawHeaders = message.rawHeaders.map((value) => Buffer.from(value, 'latin1'));
    handler.onHeaders?.(message.status, rawHeaders, () => undefined, message.statusText);
    handler.onData?.(Buffer.from(message.body));
    handler.onComplete?.([]);
  }

  #abort(id: number, reason: Error | undefined): void {
    const handler = this.#pending.get(id);
    if (!handler) return;
    this.#settled(id);
    if (this.#thread) this.#post({ kind: 'abort', id });
    handler.onError?.(reason ?? new errors.RequestAbortedError());
  }

  /** Forgets a request; an idle thread stops holding the process open. */
  #settled(id: number): void {
    this.#pending.delete(id);
    if (this.#pending.size === 0) this.#thread?.unref();
  }

  #failAll(error: Error): void {
    const handlers = [...this.#pending.values()];
    this.#pending.clear();
    this.#thread?.unref();
    for (const handler of handlers) handler.onError?.(error);
  }

  async #stop(now: boolean): Promise<void> {
    const thread = this.#thread;
    if (!thread) return;
    const exited = new Promise<void>((resolve) => thread.once('exit', () => resolve()));
    if (now) {
      await thread.terminate();
      return;
    }
    thread.ref();
    const closed = new Promise<void>((resolve) => {
      const onMessage = (batch: FromThread[]) => {
        if (!batch.some((message) => message.kind === 'closed')) return;
        thread.off('message', onMessage);
        resolve();
      };
      thread.on('message', onMessage);
    });
    this.#post({ kind: 'close' });
    await Promise.race([closed, exited]);
    await thread.terminate();
    await exited;
  }
}
