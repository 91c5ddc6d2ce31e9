// The thread of a ThreadedPool (http-thread.ts): an undici Pool whose sockets this thread's
// event loop serves, so a busy main thread (parsing, SQL, queue moves) never delays reading a
// response or writing the next request on a connection.
//
// Plain JavaScript: a worker thread loads a file, and this one must load as is both from
// src (the tests) and from dist (scripts/copy-assets.mjs copies it). The messages are typed in
// http-thread.ts:
//   in:  { kind: 'request', id, request: { method, path, headers, body, headersTimeout,
//          bodyTimeout } }, { kind: 'abort', id }, { kind: 'close' }
//   out: { kind: 'response', id, status, statusText, rawHeaders, body } (body transferred),
//        { kind: 'error', id, error: { name, code, message } }, { kind: 'closed' }
import { parentPort, workerData } from 'node:worker_threads';
import { Pool } from 'undici';

const { origin, connections, maxResponseBytes } = workerData;
const pool = new Pool(origin, { connections });
/** Requests in flight: id -> their AbortController. */
const inFlight = new Map();

parentPort.on('message', (message) => {
  if (message.kind === 'request') void send(message.id, message.request);
  else if (message.kind === 'abort') inFlight.get(message.id)?.abort();
  else if (message.kind === 'close') {
    // Waits for the requests in flight, as Pool.close does.
    void pool.close().finally(() => parentPort.postMessage({ kind: 'closed' }));
  }
});

async function send(id, request) {
  const controller = new AbortController();
  inFlight.set(id, controller);
  try {
    const response = await pool.request({ ...request, signal: controller.signal });
    const chunks = await readUpTo(response, maxResponseBytes);
    const joined = Buffer.concat(chunks);
    const body = joined.buffer.slice(joined.byteOffset, joined.byteOffset + joined.length);
    parentPort.postMessage(
      {
        kind: 'response',
        id,
        status: response.statusCode,
        statusText: response.statusText ?? '',
        rawHeaders: rawHeadersOf(response.headers),
        body,
      },
      [body],
    );
  } catch (error) {
    // An abort the main thread asked for has been answered there already.
    if (controller.signal.aborted) return;
    parentPort.postMessage({ kind: 'error', id, error: describe(error) });
  } finally {
    inFlight.delete(id);
  }
}

/**
 * The body's chunks, read past `limit` by one chunk at most, then the body is destroyed: the
 * main thread sees a body over its limit and refuses it as it would a body read there. A
 * declared length over the limit: nothing is read (refused there on the header alone).
 */
async function readUpTo(response, limit) {
  const { body } = response;
  // Destroyed unread, a body emits an abort error: expected, and not to crash this thread.
  body.on('error', () => undefined);
  const chunks = [];
  if (Number(response.headers['content-length']) > limit) {
    body.destroy();
    return chunks;
  }
  let size = 0;
  for await (const chunk of body) {
    chunks.push(chunk);
    size += chunk.length;
    if (size > limit) break; // leaving the loop destroys the body
  }
  return chunks;
}

/** undici's parsed headers back to [name, value, ...], a value per repeated header. */
function rawHeadersOf(headers) {
  const raw = [];
  for (const [name, value] of Object.entries(headers)) {
    if (Array.isArray(value)) for (const one of value) raw.push(name, one);
    else if (value !== undefined) raw.push(name, String(value));
  }
  return raw;
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
