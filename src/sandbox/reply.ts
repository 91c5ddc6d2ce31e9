/** Writes one API response (envelope or raw gateway body) after the latency, and logs it. */
import { type IncomingMessage, type ServerResponse, STATUS_CODES } from 'node:http';
import type { RequestLogEntry } from './state.js';

export interface ErrorItem {
  loc: (string | number)[];
  msg: string;
  type: string;
}

interface ErrorDetail {
  title?: string;
  errors?: ErrorItem[];
  instance?: string;
  headers?: Record<string, string>;
}

export type TimerSet = Set<NodeJS.Timeout>;

export class Reply {
  /** For the request log and per-consumer faults. */
  consumerId: string | undefined;
  /** A `delay` fault that still processes. */
  holdMs = 0;
  /** A `malformed` fault on a write: the write happens, its 2xx body is mangled. */
  successBodyOverride: { text: string; contentType: string } | undefined;
  private done = false;

  constructor(
    private readonly req: IncomingMessage,
    private readonly res: ServerResponse,
    private readonly latencyMs: number,
    private readonly timers: TimerSet,
    private readonly record: (entry: RequestLogEntry) => void,
  ) {}

  json(status: number, value: unknown): void {
    this.send(status, JSON.stringify(value), 'application/json');
  }

  jsonText(status: number, text: string | Buffer): void {
    this.send(status, text, 'application/json');
  }

  /** The spec's error envelope; errors and instance null unless given. */
  error(status: number, code: string, detail: ErrorDetail = {}): void {
    const { title = STATUS_CODES[status] ?? 'Error', errors = null, instance = null } = detail;
    const body = JSON.stringify({ code, title, status, errors, instance });
    this.send(status, body, 'application/json', detail.headers);
  }

  /** After `extraDelayMs` plus the latency. An empty body has no type. */
  send(
    status: number,
    body: string | Buffer,
    contentType?: string,
    headers: Record<string, string> = {},
    extraDelayMs = 0,
  ): void {
    if (this.done) return;
    this.done = true;
    if (this.successBodyOverride && status >= 200 && status < 300) {
      ({ text: body, contentType } = this.successBodyOverride);
    }
    const write = () => {
      // The client gave up: log what it would have received.
      if (this.res.destroyed) {
        this.log(status);
        return;
      }
      const all: Record<string, string | number> = {
        ...headers,
        'content-length': Buffer.byteLength(body),
      };
      if (contentType) all['content-type'] = contentType;
      this.res.writeHead(status, all);
      this.res.end(body);
      this.log(status);
    };
    this.later(extraDelayMs + this.holdMs + this.latencyMs, write);
  }

  reset(): void {
    if (this.done) return;
    this.done = true;
    this.log(0);
    this.req.socket.destroy();
  }

  later(ms: number, fn: () => void): void {
    if (ms <= 0) {
      fn();
      return;
    }
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      fn();
    }, ms);
    this.timers.add(timer);
  }

  private log(status: number): void {
    const entry: RequestLogEntry = {
      method: this.req.method ?? 'GET',
      path: this.req.url ?? '/',
      status,
      at: new Date().toISOString(),
    };
    if (this.consumerId !== undefined) entry.consumerId = this.consumerId;
    this.record(entry);
  }
}
