import { RateLimitError, UnrecoverableError } from 'bullmq';
import { describe, expect, it } from 'vitest';
import { BackToWait, isPermanent, pauseFor, steerFailure } from '../../src/jobs/failures.js';
import {
  AuthError,
  ResponseShapeError,
  TokenMintError,
  TransportError,
  UpstreamError,
  ValidationError,
} from '../../src/perks/errors.js';
import { InvalidPayloadError } from '../../src/queues/payloads.js';
import type { Queues } from '../../src/queues/queues.js';

describe('which failures are permanent', () => {
  it('our own bad input and the API refusing this consumer are permanent; a 403 is not', () => {
    // An enrollment answered with another consumer's id: a retry would get 409 and pass.
    const otherId = { operation: 'enrollConsumer', status: 201, path: 'id' };
    expect(isPermanent(new ResponseShapeError('another id', otherId))).toBe(true);
    const badPage = { operation: 'listRewardPages', status: 200 };
    expect(isPermanent(new ResponseShapeError('not JSON', badPage))).toBe(false);
    expect(isPermanent(new InvalidPayloadError('bad'))).toBe(true);
    expect(
      isPermanent(new ValidationError('400', { operation: 'enrollConsumer', status: 400 })),
    ).toBe(true);
    // The token's scope or program: the credentials' outage (pauseFor), not this consumer's.
    expect(isPermanent(new AuthError('403', { operation: 'enrollConsumer', status: 403 }))).toBe(
      false,
    );
  });

  it('outages, a 401 and any failure of the token endpoint are retried', () => {
    expect(
      isPermanent(new UpstreamError('502', { operation: 'listRewardPages', status: 502 })),
    ).toBe(false);
    expect(isPermanent(new AuthError('401', { operation: 'listRewardPages', status: 401 }))).toBe(
      false,
    );
    // A token endpoint that rejects our request says nothing about the consumer of the job.
    const refused = new ValidationError('400', { operation: 'mintToken', status: 400 });
    expect(isPermanent(TokenMintError.from(refused))).toBe(false);
    const forbidden = new AuthError('403', { operation: 'mintToken', status: 403 });
    expect(isPermanent(TokenMintError.from(forbidden))).toBe(false);
  });

  it('turns a permanent failure into UnrecoverableError, keeping its message', async () => {
    const ctx = {
      queues: {} as Queues,
      mintOutage: { failed: async () => {}, probe: async () => true },
      datastoreOutage: { met: async () => false },
    };
    const error = new ValidationError('enrollConsumer: HTTP 400 ERR-400-00 Bad Request', {
      operation: 'enrollConsumer',
      status: 400,
    });
    await expect(steerFailure(error, ctx)).rejects.toThrow(UnrecoverableError);
    await expect(steerFailure(error, ctx)).rejects.toThrow(/ERR-400-00/);
  });

  it('sends a job that met a failing mint back to wait, after pausing the queues', async () => {
    const seen: TokenMintError[] = [];
    const ctx = {
      queues: {} as Queues,
      mintOutage: {
        failed: async (error: TokenMintError) => void seen.push(error),
        probe: async () => true,
      },
      datastoreOutage: { met: async () => false },
    };
    const refused = new AuthError('mintToken: HTTP 401 ERR-401-00', {
      operation: 'mintToken',
      status: 401,
      code: 'ERR-401-00',
    });
    const thrown = await steerFailure(TokenMintError.from(refused), ctx).catch((e: unknown) => e);
    expect(thrown).toBeInstanceOf(BackToWait);
    expect((thrown as BackToWait).why).toBe('token mint failing');
    // BullMQ recognises a manual rate limit by this message alone.
    expect((thrown as Error).message).toBe(new RateLimitError().message);
    expect(seen.map((e) => e.code)).toEqual(['ERR-401-00']);
  });
});

describe('failures that pause the API jobs', () => {
  const forbidden = () =>
    new AuthError('listRewardPages: HTTP 403 ERR-403-00 Forbidden', {
      operation: 'listRewardPages',
      status: 403,
      code: 'ERR-403-00',
    });

  it('a 403 the probe meets too is the credentials outage (the probe records it)', async () => {
    let probes = 0;
    const ctx = {
      queues: {} as never,
      mintOutage: {
        probe: async () => {
          probes += 1;
          return false;
        },
      } as never,
      datastoreOutage: {} as never,
    };
    expect(await pauseFor(forbidden(), ctx)).toBe('credentials refused (403)');
    expect(probes).toBe(1);
  });

  it("a 403 the probe does not meet is that resource's: the job's own failure, no pause", async () => {
    const ctx = {
      queues: {} as never,
      mintOutage: { probe: async () => true } as never,
      datastoreOutage: {} as never,
    };
    expect(await pauseFor(forbidden(), ctx)).toBeUndefined();
    const thrown = await steerFailure(forbidden(), ctx).catch((e: unknown) => e);
    expect(thrown).toBeInstanceOf(AuthError);
  });
});

describe('PostgreSQL away', () => {
  const lost = () => new Error('Connection terminated unexpectedly');
  const steering = (away: boolean, asked: unknown[] = []) => ({
    queues: {} as never,
    mintOutage: {} as never,
    datastoreOutage: {
      met: async (error: unknown) => {
        asked.push(error);
        return away;
      },
    },
  });

  it('confirmed by a ping: back to wait, no attempt spent', async () => {
    const thrown = await steerFailure(lost(), steering(true)).catch((e: unknown) => e);
    expect(thrown).toBeInstanceOf(BackToWait);
    expect((thrown as BackToWait).why).toBe('postgres unreachable');
  });

  it("not confirmed (the ping answers): the job's own failure, retried", async () => {
    const error = lost();
    expect(await steerFailure(error, steering(false)).catch((e: unknown) => e)).toBe(error);
  });

  it('an API timeout or reset, with the same codes, is never taken for it', async () => {
    const asked: unknown[] = [];
    for (const transportCode of ['ETIMEDOUT', 'ECONNRESET', 'ECONNREFUSED']) {
      const error = new TransportError(`listRewardPages: ${transportCode}`, {
        operation: 'listRewardPages',
        transportCode,
      });
      expect(await steerFailure(error, steering(true, asked)).catch((e: unknown) => e)).toBe(error);
    }
    expect(asked).toEqual([]);
  });
});
