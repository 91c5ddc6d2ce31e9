/**
 * This replica's workers, paused for outages that may overlap (the token mint failing,
 * PostgreSQL away): a worker resumes only once every outage holding it has ended, so the end
 * of one never sets jobs loose on another.
 */
import type { Worker } from 'bullmq';

export class WorkerPauses {
  readonly #holds = new Map<Worker, Set<string>>();

  /** Pauses `workers` for `outage` (again: no change). Never throws. */
  async hold(outage: string, workers: readonly Worker[]): Promise<void> {
    const pausing = workers.filter((worker) => {
      const holds = this.#holds.get(worker) ?? new Set<string>();
      const running = holds.size === 0;
      this.#holds.set(worker, holds.add(outage));
      return running;
    });
    // Not waiting for the active jobs: a job's own failure pauses its worker.
    await Promise.allSettled(pausing.map((worker) => worker.pause(true)));
  }

  /** `outage` has ended: the workers it alone held resume. Never throws. */
  async release(outage: string): Promise<void> {
    const resuming = [...this.#holds].flatMap(([worker, holds]) =>
      holds.delete(outage) && holds.size === 0 ? [worker] : [],
    );
    for (const worker of resuming) this.#holds.delete(worker);
    await Promise.allSettled(resuming.map(async (worker) => worker.resume()));
  }
}
