/**
 * A failing token mint is an outage of credentials or of the token endpoint, never of one
 * consumer, so no job spends an attempt on it: a job that meets it goes back to wait, and this
 * replica's API workers pause for 1 s, doubling with each failed mint up to 60 s, at whose end
 * it mints again; the first that works resumes them. Only this replica's: the cause may be its
 * own (a wrong PERKS_BASE_URL, its network, a proxy), and a replica that can mint, or holds a
 * token, works on. The failure is kept in Redis by credentials while it lasts, for `status`, and
 * for /readyz of the replicas holding credentials the endpoint refused (401, 403).
 */
import type { Worker } from 'bullmq';
import { z } from 'zod';
import { NotReadyError } from '../ops/health.js';
import type { Logger } from '../ops/logger.js';
import { withTimeout } from '../ops/timeouts.js';
import type { CredentialSource } from '../perks/client.js';
import { TokenMintError, tryJson } from '../perks/errors.js';
import type { RedisClient } from '../redis/connection.js';
import { OutageRounds, type WorkerPauses } from './pauses.js';

// Whose (client id), refused or not, since when, why (`mintFailureReason`), the error's message
// (our text, no secrets), failed mints in a row (by the replica that wrote it), next mint.
const mintFailureSchema = z.object({
  clientId: z.string(),
  refused: z.boolean(),
  since: z.string(),
  reason: z.string(),
  message: z.string(),
  failures: z.number(),
  nextTryAt: z.string(),
});
export type MintFailure = z.infer<typeof mintFailureSchema>;

/** A hash, a field per credentials (`credentialsName`). */
const mintFailuresKey = (prefix: string) => `${prefix}:perks:mint-failures`;

/** The failures recorded: of the credentials `name`, or of all. */
export async function readMintFailures(redis: RedisClient, prefix: string, name?: string) {
  const key = mintFailuresKey(prefix);
  const values = name ? [await redis.hget(key, name)] : Object.values(await redis.hgetall(key));
  return values.flatMap((value) => mintFailureSchema.safeParse(tryJson(value ?? '')).data ?? []);
}

/** `401 ERR-401-00`, `503`, `ECONNREFUSED`: what failed, with nothing but status and code. */
function mintFailureReason(error: TokenMintError): string {
  const parts = [error.status, error.code].filter((p) => p !== undefined);
  return parts.length > 0 ? parts.join(' ') : error.name;
}

interface MintOutageOptions {
  redis: RedisClient;
  prefix: string;
  logger: Logger;
  /** Mints a new token and tries its scope (PerksClient.checkCredentialsInUse). */
  mint: () => Promise<void>;
  /** The credentials minting now; their `credentialsName` keys the record. */
  credentials: Pick<CredentialSource, 'current'>;
  name: () => string;
  pauses: WorkerPauses;
}

/** The record outlives its pause by this much: a replica that died mid-outage leaves no trace. */
const recordSlackMs = 120_000;
/** A probe that worked this recently answers for a new one. */
const probeReuseMs = 10_000;

export class MintOutage {
  readonly #rounds: OutageRounds;
  #probing: Promise<boolean> | undefined;
  #closed = false;
  /** The credentials of the failure recorded, and whether they were refused. */
  #recordedAs: string | undefined;
  #refused = false;
  #reason = '';
  /** When a probe last worked. */
  #workedAt = 0;

  constructor(private readonly options: MintOutageOptions) {
    const retry = () => void this.probe();
    this.#rounds = new OutageRounds({ outage: 'token mint', pauses: options.pauses, retry });
  }

  /** The workers of the API queues, paused while this replica cannot mint. */
  attach(workers: Worker[]): void {
    this.#rounds.attach(workers);
  }

  /**
   * Mints now. True when it worked; a failure pauses as `failed` does. One that
   * worked in the last few seconds with no failure since answers for it: a run of 403s of
   * single consumers (each asks) must not mint a token each. `fresh`: new credentials, no reuse.
   */
  probe(fresh = false): Promise<boolean> {
    if (!fresh && !this.#rounds.on && Date.now() - this.#workedAt < probeReuseMs) {
      return Promise.resolve(true);
    }
    this.#probing ??= this.#probe().finally(() => {
      this.#probing = undefined;
    });
    return this.#probing;
  }

  /**
   * A mint failed, in a job or a probe: pause this replica's API workers, mint again when the
   * pause ends.
   * Failures during a pause are the same round's. Never throws: the job must go back to wait.
   */
  async failed(error: TokenMintError): Promise<void> {
    if (this.#rounds.pausing) return;
    await this.#round(error);
  }

  /** A round of the outage: its probe's failure starts one too, however early its timer fired. */
  async #round(error: TokenMintError): Promise<void> {
    // Closing aborts a mint in flight: that is no outage.
    const round = this.#closed ? undefined : this.#rounds.begin();
    const since = this.#rounds.on?.since;
    if (!round || !since) return;
    const { failures, pauseMs } = round;
    this.#refused = error.status === 401 || error.status === 403;
    const { redis, prefix, logger } = this.options;
    const [name, { clientId }] = [this.options.name(), this.options.credentials.current()];
    this.#recordedAs = name;
    this.#reason = mintFailureReason(error);
    const failure: MintFailure = {
      clientId,
      refused: this.#refused,
      since: since.toISOString(),
      reason: this.#reason,
      message: error.message,
      failures,
      nextTryAt: new Date(Date.now() + pauseMs).toISOString(),
    };
    const fields = { clientId, reason: failure.reason, failures, pauseMs };
    const first =
      'perks api: cannot mint a token; this replica takes no API job until a mint works';
    if (!round.first) logger.warn(fields, 'perks api: token mint still failing');
    else logger.error({ ...fields, err: { name: error.name, message: error.message } }, first);
    const key = mintFailuresKey(prefix);
    await Promise.allSettled([
      this.#rounds.hold(pauseMs),
      redis.hset(key, name, JSON.stringify(failure)),
      redis.pexpire(key, pauseMs + recordSlackMs),
    ]);
  }

  /**
   * For /readyz: throws while this replica cannot mint, or while a replica holding these
   * credentials records them refused (another failure is that replica's own).
   */
  async check(): Promise<void> {
    // Refused: at the mint (401, 403) or by the API for the token's scope (403).
    const state = (refused: boolean) => (refused ? 'credentials refused' : 'token mint failing');
    if (this.#rounds.on) throw new NotReadyError(`${state(this.#refused)} (${this.#reason})`);
    const { redis, prefix, name } = this.options;
    // Redis away or silent (its own check says so): within the ops server's 2 s for a check.
    const record = withTimeout(readMintFailures(redis, prefix, name()), 1000);
    const [refused] = (await record.catch(() => [])).filter((failure) => failure.refused);
    if (refused) throw new NotReadyError(`${state(true)} (${refused.reason})`);
  }

  /** Stops probing; its record goes (a replica with the same credentials renews it). */
  async close(): Promise<void> {
    this.#closed = true;
    this.#rounds.close();
    if (this.#recordedAs)
      await this.options.redis.hdel(mintFailuresKey(this.options.prefix), this.#recordedAs);
  }

  async #probe(): Promise<boolean> {
    try {
      await this.options.mint();
    } catch (error) {
      await this.#round(error instanceof TokenMintError ? error : TokenMintError.from(error));
      return false;
    }
    this.#workedAt = Date.now();
    await this.#recovered();
    return true;
  }

  async #recovered(): Promise<void> {
    const { redis, prefix, logger } = this.options;
    const names = [this.options.name(), this.#recordedAs ?? ''];
    this.#refused = false;
    this.#recordedAs = undefined;
    const ended = await this.#rounds.end();
    // A record of the outage, ours or of another replica with these credentials (one restarted
    // finds its predecessor's): a mint works now, so it goes.
    const recorded = await redis.hdel(mintFailuresKey(prefix), ...names).catch(() => 0);
    if (!ended && recorded === 0) return;
    logger.info(
      { failures: ended?.failures ?? 0, downMs: ended?.downMs },
      'perks api: token mint works again; the API jobs resume',
    );
  }
}
