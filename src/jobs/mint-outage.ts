/**
 * A failing token mint is an outage of our credentials or of the token endpoint, never of one
 * consumer, so no job spends an attempt on it: both API queues pause (`queue.rateLimit`, seen
 * by every replica) for 1 s, doubling with each failed mint up to 60 s, and a job that meets
 * it goes back to wait. At each pause's end this replica mints again (the pause lasts a little
 * longer, so that mint is the round's only one); the first that works lifts the pause. The
 * failure is kept in Redis while it lasts, for /readyz of every replica and `status`.
 */
import { z } from 'zod';
import { NotReadyError } from '../ops/health.js';
import type { Logger } from '../ops/logger.js';
import { TokenMintError, tryJson } from '../perks/errors.js';
import type { Queues } from '../queues/queues.js';
import type { RedisClient } from '../redis/connection.js';
import { pauseApiQueues } from './failures.js';

// Since when, why (`mintFailureReason`), the error's message (our text, no secrets), failed
// mints in a row (by the replica that wrote it), and when the next mint is tried.
const mintFailureSchema = z.object({
  since: z.string(),
  reason: z.string(),
  message: z.string(),
  failures: z.number(),
  nextTryAt: z.string(),
});
export type MintFailure = z.infer<typeof mintFailureSchema>;

const mintFailureKey = (prefix: string) => `${prefix}:perks:mint-failure`;

/** The failure recorded by any replica, if a mint is failing now. */
export async function readMintFailure(redis: RedisClient, prefix: string) {
  const value = await redis.get(mintFailureKey(prefix));
  return mintFailureSchema.safeParse(value === null ? undefined : tryJson(value)).data;
}

/** `401 ERR-401-00`, `503`, `ECONNREFUSED`: what failed, with nothing but status and code. */
function mintFailureReason(error: TokenMintError): string {
  const parts = [error.status, error.code].filter((p) => p !== undefined);
  return parts.length > 0 ? parts.join(' ') : error.name;
}

interface MintOutageOptions {
  redis: RedisClient;
  prefix: string;
  queues: Pick<Queues, 'enrollment' | 'rewardSync'>;
  logger: Logger;
  /** Mints a new token (PerksClient.checkCredentials). */
  mint: () => Promise<void>;
}

const [minPauseMs, maxPauseMs] = [1000, 60_000];
/** The record outlives its pause by this much: a replica that died mid-outage leaves no trace. */
const recordSlackMs = 120_000;
/** The queues' pause outlasts this replica's next mint by this much; that mint lifts it. */
const probeSlackMs = 5_000;

export class MintOutage {
  #failures = 0;
  #since: Date | undefined;
  #pausedUntil = 0;
  #timer: NodeJS.Timeout | undefined;
  #probing: Promise<boolean> | undefined;
  #closed = false;

  constructor(private readonly options: MintOutageOptions) {}

  /** Mints now. True when it worked; a failure pauses the queues as `failed` does. */
  probe(): Promise<boolean> {
    this.#probing ??= this.#probe().finally(() => {
      this.#probing = undefined;
    });
    return this.#probing;
  }

  /**
   * A mint failed, in a job or a probe: pause the API queues, mint again when the pause ends.
   * Failures during a pause are the same round's. Never throws: the job must go back to wait.
   */
  async failed(error: TokenMintError): Promise<void> {
    const now = Date.now();
    if (now < this.#pausedUntil) return;
    this.#failures += 1;
    this.#since ??= new Date(now);
    const { queues, redis, prefix, logger } = this.options;
    const pauseMs = Math.min(minPauseMs * 2 ** (this.#failures - 1), maxPauseMs);
    this.#pausedUntil = now + pauseMs;
    const failure: MintFailure = {
      since: this.#since.toISOString(),
      reason: mintFailureReason(error),
      message: error.message,
      failures: this.#failures,
      nextTryAt: new Date(this.#pausedUntil).toISOString(),
    };
    const fields = { reason: failure.reason, failures: this.#failures, pauseMs };
    const first = 'perks api: cannot mint a token; the API queues are paused until a mint works';
    if (this.#failures > 1) logger.warn(fields, 'perks api: token mint still failing');
    else logger.error({ ...fields, err: { name: error.name, message: error.message } }, first);
    await Promise.allSettled([
      pauseApiQueues(queues, pauseMs + probeSlackMs),
      redis.set(mintFailureKey(prefix), JSON.stringify(failure), 'PX', pauseMs + recordSlackMs),
    ]);
    if (this.#closed) return;
    clearTimeout(this.#timer);
    this.#timer = setTimeout(() => void this.probe(), pauseMs);
    this.#timer.unref();
  }

  /** For /readyz: throws while any replica records a failing mint. */
  async check(): Promise<void> {
    const failure = await readMintFailure(this.options.redis, this.options.prefix);
    if (failure) throw new NotReadyError(`token mint failing (${failure.reason})`);
  }

  close(): void {
    this.#closed = true;
    clearTimeout(this.#timer);
  }

  async #probe(): Promise<boolean> {
    try {
      await this.options.mint();
    } catch (error) {
      await this.failed(error instanceof TokenMintError ? error : TokenMintError.from(error));
      return false;
    }
    await this.#recovered();
    return true;
  }

  async #recovered(): Promise<void> {
    const { queues, redis, prefix, logger } = this.options;
    const failures = this.#failures;
    const since = this.#since;
    this.#failures = 0;
    this.#since = undefined;
    this.#pausedUntil = 0;
    // A record of the outage, ours or another replica's (one restarted with a fixed secret
    // finds its predecessor's): the credentials work now, so it goes, and so does the pause.
    // With neither, a pause is a 429's, and stays.
    const recorded = await redis.del(mintFailureKey(prefix)).catch(() => 0);
    if (failures === 0 && recorded === 0) return;
    await Promise.allSettled(
      [queues.enrollment, queues.rewardSync].map((q) => q.removeRateLimitKey()),
    );
    logger.info(
      { failures, downMs: since ? Date.now() - since.getTime() : undefined },
      'perks api: token mint works again; the API queues resume',
    );
  }
}
