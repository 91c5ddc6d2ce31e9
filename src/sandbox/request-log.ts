/** What the sandbox saw, for tests and benchmarks: never headers or bodies, so no secret. */

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

/** The last `capacity` entries: a long benchmark does not keep them all. */
export class RequestLog {
  private readonly entries: RequestLogEntry[] = [];

  constructor(private readonly capacity = 1000) {}

  add(entry: RequestLogEntry): void {
    this.entries.push(entry);
    if (this.entries.length > this.capacity) this.entries.shift();
  }

  /** Oldest first. */
  list(): RequestLogEntry[] {
    return [...this.entries];
  }

  clear(): void {
    this.entries.length = 0;
  }
}

export function emptyCounters(): SandboxCounters {
  return { requests: {}, tokensMinted: 0, enrollmentsCreated: 0, enrollmentsConflicted: 0 };
}
