/**
 * What the sandbox saw: a bounded request log and counters. Built for tests and benchmarks to
 * assert on, so it records only method, path, status and consumer id: never headers or
 * bodies, hence never a token or a client secret.
 */

export interface RequestLogEntry {
  method: string;
  /** Path and query string as received. The API carries no credential in either. */
  path: string;
  /** HTTP status sent; 0 when the connection was reset on purpose (a `reset` fault). */
  status: number;
  consumerId?: string;
  /** RFC 3339 time the response was sent. */
  at: string;
}

export interface SandboxCounters {
  /** Requests per route: token, enroll, listRewards, getReward, unknown. */
  requests: Record<string, number>;
  tokensMinted: number;
  enrollmentsCreated: number;
  enrollmentsConflicted: number;
}

/** A ring buffer: a long benchmark keeps the last `capacity` entries, not all of them. */
export class RequestLog {
  private readonly entries: RequestLogEntry[] = [];
  private next = 0;

  constructor(private readonly capacity = 1000) {}

  add(entry: RequestLogEntry): void {
    if (this.entries.length < this.capacity) {
      this.entries.push(entry);
    } else {
      this.entries[this.next] = entry;
    }
    this.next = (this.next + 1) % this.capacity;
  }

  /** Oldest first. */
  list(): RequestLogEntry[] {
    if (this.entries.length < this.capacity) return [...this.entries];
    return [...this.entries.slice(this.next), ...this.entries.slice(0, this.next)];
  }

  clear(): void {
    this.entries.length = 0;
    this.next = 0;
  }
}

export function emptyCounters(): SandboxCounters {
  return { requests: {}, tokensMinted: 0, enrollmentsCreated: 0, enrollmentsConflicted: 0 };
}
