/**
 * ThreadedPool: an undici Dispatcher whose connections live on a thread of their own
 * (http-thread-worker.mjs), for `request()` like any Pool.
 *
 * Why: the worker's main thread is busy most of the time (parsing pages, writing them, moving
 * jobs), and on it every connection waited twice per request for the event loop: to read the
 * response, then a full loop turn before undici writes the next request on the socket. On
 * its own thread a connection turns over at once; the main thread gets the responses in
 * batched messages (bench/RESULTS.md, round 14).
 *
 * What crosses: the request (method, path, headers, a string or bytes body, the timeouts)
 * and the whole response (status, headers, body bytes, transferred, not copied), or an error
 * as its name, code and message. A body over `maxResponseBytes` fails the request with
 * undici's UND_ERR_RES_EXCEEDED_MAX_SIZE (the thread's Pool's maxResponseSize; exchange()
 * reports it as ResponseTooLargeError). Aborting a request answers it here at once and aborts it on the
 * thread. Only request()-style handlers (onHeaders, onError) are taken.
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
  /** A larger body fails its request (the thread's Pool's maxResponseSize). */
  maxResponseBytes: number;
}

/** The messages of http-thread-worker.mjs. */
interface ThreadRequest {
  method: string;
  path: string;
  /** [name, value, ...]. */
  headers: string[];
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
    if (typeof handler.onHeaders !== 'function' || typeof handler.onError !== 'function') {
      // A controller-style handler (compose()'s interceptors) would never hear back.
      throw new errors.InvalidArgumentError(
        'ThreadedPool takes handlers with onHeaders and onError, as request() makes',
      );
    }
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
        headers: flatHeaders(options.headers),
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
      // Refused here: closed, another origin, a body or header it cannot send.
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
    // An 'error' (an exception on the thread) is followed by 'exit', whose error names it.
    let failure: Error | undefined;
    thread.on('error', (error) => {
      failure = error;
    });
    thread.once('exit', (code) => {
      if (this.#thread === thread) {
        this.#thread = undefined;
        this.#outbox = []; // requests failed below, not to be sent to a new thread
      }
      const why = failure ? `: ${failure.name}: ${failure.message}` : '';
      const error = Object.assign(new Error(`the HTTP thread exited (code ${code})${why}`), {
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
    try {
      this.#thread?.postMessage(batch);
    } catch (error) {
      // Not sent (dispatch checks what it sends, so this is not expected): its requests fail
      // instead of waiting forever.
      for (const message of batch) {
        if (message.kind === 'request')
          this.#answer(message.id, (h) => h.onError?.(error as Error));
      }
    }
  }

  #onMessage(message: FromThread): void {
    if (message.kind === 'closed') return;
    if (message.kind === 'error') {
      const { name, message: text, code } = message.error;
      const error = Object.assign(new Error(text), { name, ...(code ? { code } : {}) });
      this.#answer(message.id, (handler) => handler.onError?.(error));
      return;
    }
    this.#answer(message.id, (handler) => {
      const rawHeaders = message.rawHeaders.map((value) => Buffer.from(value, 'latin1'));
      handler.onHeaders?.(message.status, rawHeaders, () => undefined, message.statusText);
      handler.onData?.(Buffer.from(message.body));
      handler.onComplete?.([]);
    });
  }

  /**
   * Settles request `id` (if still pending) with `deliver`. A handler that throws gets its
   * error as onError, as undici's own dispatchers do; one that throws again has it rethrown
   * on its own, after the rest of the batch has been delivered.
   */
  #answer(id: number, deliver: (handler: Handler) => void): void {
    const handler = this.#pending.get(id);
    if (!handler) return; // aborted here already
    this.#settled(id);
    try {
      deliver(handler);
    } catch (error) {
      try {
        handler.onError?.(error as Error);
      } catch (again) {
        queueMicrotask(() => {
          throw again;
        });
      }
    }
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
    if (this.#pending.size === 0 && !this.#closing) this.#thread?.unref();
  }

  #failAll(error: Error): void {
    for (const id of [...this.#pending.keys()]) {
      this.#answer(id, (handler) => handler.onError?.(error));
    }
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

/**
 * Request headers as [name, value, ...] strings, whatever form they were given in (an
 * object, an array, an iterable such as Headers): what crosses to the thread as is.
 */
function flatHeaders(headers: Dispatcher.DispatchOptions['headers']): string[] {
  const flat: string[] = [];
  const add = (name: unknown, value: unknown) => {
    if (value === undefined || value === null) return;
    for (const one of Array.isArray(value) ? value : [value]) flat.push(String(name), String(one));
  };
  if (headers === undefined || headers === null) return flat;
  if (Array.isArray(headers)) {
    for (let i = 0; i < headers.length; i += 2) add(headers[i], headers[i + 1]);
  } else if (Symbol.iterator in headers) {
    for (const [name, value] of headers as Iterable<[string, unknown]>) add(name, value);
  } else {
    for (const [name, value] of Object.entries(headers)) add(name, value);
  }
  return flat;
}
