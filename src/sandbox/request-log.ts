/** What the sandbox saw: never headers or bodies, so no secret. */

export interface RequestLogEntry {
  method: string;
  /** Path and query string as received. */
  path: string;
  /** 0 when reset on purpose. */
  status: number;
  consumerId?: string;
  at: string;
}

export interface SandboxCounters {
  /** Per route: token, enroll, listRewards, getReward, unknown. */
  requests: Record<string, number>;
  tokensMinted: number;
  enrollmentsCreated: number;
  enrollmentsConflicted: number;
}

/** The last `capacity` entries. */
export class RequestLog {
  private readonly entries: RequestLogEntry[] = [];

  constructor(private readonly capacity = 1000) {}

  add(entry: RequestLogEntry): void {
    this.entries.push(entry);
    if (this.entries.length > this.capacity) this.entries.shift();
  }

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
