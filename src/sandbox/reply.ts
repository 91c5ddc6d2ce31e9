/** Writes one API response (envelope or raw gateway body) after the latency, and logs it. */
import { type IncomingMessage, type ServerResponse, STATUS_CODES } from 'node:http';
import type { RequestLog, RequestLogEntry } from './state.js';

export type ErrorItem = { loc: (string | number)[]; msg: string; type: string };

interface ErrorDetail {
  title?: string;
  errors?: ErrorItem[];
  instance?: string;
  headers?: Record<string, string>;
}

export class Reply {
  /** For the request log and per-consumer faults. */
  consumerId: string | undefined;
  /** A `delay` fault. */
  holdMs = 0;
  /** A `malformed` fault on a write: the write happens, its 2xx JSON body is this. */
  successBodyOverride: string | undefined;
  /** Sent or reset. */
  done = false;
  /** Sent without the added latency. */
  immediate = false;

  constructor(
    readonly req: IncomingMessage,
    readonly res: ServerResponse,
    private readonly timers: Set<NodeJS.Timeout>,
    private readonly latencyMs = 0,
    private readonly requestLog?: RequestLog,
  ) {}

  json(status: number, value: unknown): void {
    this.send(status, JSON.stringify(value), 'application/json');
  }

  /** The spec's error envelope; errors and instance null unless given. */
  error(status: number, code: string, detail: ErrorDetail = {}): void {
    const { title = STATUS_CODES[status] ?? 'Error', errors = null, instance = null } = detail;
    const body = JSON.stringify({ code, title, status, errors, instance });
    this.send(status, body, 'application/json', detail.headers);
  }

  /** After the hold and the latency. An empty body has no type. */
  send(status: number, body: string | Buffer, type?: string, headers: Record<string, string> = {}) {
    if (this.done) return;
    this.done = true;
    if (this.successBodyOverride !== undefined && status >= 200 && status < 300) {
      [body, type] = [this.successBodyOverride, 'application/json'];
    }
    const write = () => {
      // Unless the client gave up; the log has what it would have received.
      if (!this.res.destroyed) {
        const length = Buffer.byteLength(body);
        const typed = type ? { 'content-type': type } : {};
        this.res.writeHead(status, { ...headers, 'content-length': length, ...typed });
        this.res.end(body);
      }
      this.log(status);
    };
    const ms = this.holdMs + (this.immediate ? 0 : this.latencyMs);
    if (ms <= 0) return write();
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      write();
    }, ms);
    this.timers.add(timer);
  }

  reset(): void {
    if (this.done) return;
    this.done = true;
    this.log(0);
    this.req.socket.destroy();
  }

  private log(status: number): void {
    const { method = 'GET', url: path = '/' } = this.req;
    const entry: RequestLogEntry = { method, path, status, at: new Date().toISOString() };
    if (this.consumerId !== undefined) entry.consumerId = this.consumerId;
    this.requestLog?.add(entry);
  }
}
