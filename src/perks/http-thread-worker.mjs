// The thread of a ThreadedPool (http-thread.ts): an undici Pool whose sockets this thread's
// event loop serves, so a busy main thread (parsing, SQL, queue moves) never delays reading a
// response or writing the next request on a connection.
//
// Plain JavaScript: a worker thread loads a file, and this one must load as is both from
// src (the tests) and from dist (scripts/copy-assets.mjs copies it). The messages are typed in
// http-thread.ts:
// each message is an array of
//   in:  { kind: 'request', id, request: { method, path, headers, body, headersTimeout,
//          bodyTimeout } }, { kind: 'abort', id }, { kind: 'close' }
//   out: { kind: 'response', id, status, statusText, rawHeaders, body } (body transferred),
//        { kind: 'error', id, error: { name, code, message } }, { kind: 'closed' }
import { parentPort, workerData } from 'node:worker_threads';
import { Pool } from 'undici';

const { origin, connections, maxResponseBytes } = workerData;
// A body over maxResponseBytes fails its request with UND_ERR_RES_EXCEEDED_MAX_SIZE, which
// exchange() reports as ResponseTooLargeError.
const pool = new Pool(origin, { connections, maxResponseSize: maxResponseBytes });
/** Requests in flight: id -> the function that aborts it. */
const inFlight = new Map();

parentPort.on('message', (batch) => {
  for (const message of batch) {
    if (message.kind === 'request') send(message.id, message.request);
    else if (message.kind === 'abort') inFlight.get(message.id)?.(new Error('aborted'));
    else if (message.kind === 'close') {
      // Waits for the requests in flight, as Pool.close does.
      void pool.close().finally(() => post({ kind: 'closed' }));
    }
  }
});

/**
 * Messages to the main thread go in batches, one per turn of this loop: a message costs each
 * thread more than its contents do (bench/RESULTS.md, round 14).
 */
let outbox = [];
let transfers = [];
function post(message, transfer) {
  if (outbox.length === 0) setImmediate(flush);
  outbox.push(message);
  if (transfer) transfers.push(transfer);
}
function flush() {
  const batch = outbox;
  const transfer = transfers;
  outbox = [];
  transfers = [];
  parentPort.postMessage(batch, transfer);
}

/** One request, on the Pool's own dispatch: its chunks are gathered as they come. */
function send(id, request) {
  const chunks = [];
  let size = 0;
  let status = 0;
  let statusText = '';
  let rawHeaders = [];
  let abort;
  let settled = false;
  const respond = () => {
    if (settled) return;
    settled = true;
    inFlight.delete(id);
    // One copy, into a buffer of its own that can be transferred (a Buffer may share its
    // memory with others).
    const bytes = new Uint8Array(size);
    let offset = 0;
    for (const chunk of chunks) {
      bytes.set(chunk, offset);
      offset += chunk.length;
    }
    const body = bytes.buffer;
    const message = { kind: 'response', id, status, statusText, rawHeaders, body };
    post(message, body);
  };
  inFlight.set(id, (reason) => {
    settled = true; // answered on the main thread already
    inFlight.delete(id);
    abort?.(reason);
  });
  pool.dispatch(request, {
    onConnect(abortRequest) {
      if (settled) abortRequest(new Error('aborted'));
      else abort = abortRequest;
    },
    onHeaders(statusCode, headers, _resume, text) {
      if (statusCode < 200) return true; // 1xx: the response follows
      status = statusCode;
      statusText = text ?? '';
      rawHeaders = headers.map((value) =>
        typeof value === 'string' ? value : value.toString('latin1'),
      );
      return true;
    },
    onData(chunk) {
      chunks.push(chunk);
      size += chunk.length;
      return true;
    },
    onComplete() {
      respond();
    },
    onError(error) {
      if (settled) return;
      settled = true;
      inFlight.delete(id);
      post({ kind: 'error', id, error: describe(error) });
    },
  });
}

/** What crosses to the main thread of an error: its class name, code and message. */
function describe(error) {
  if (error instanceof Error) {
    const code = error.code ?? error.cause?.code;
    return {
      name: error.name,
      message: error.message,
      ...(typeof code === 'string' ? { code } : {}),
    };
  }
  return { name: 'Error', message: String(error) };
}
