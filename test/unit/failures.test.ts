import { UnrecoverableError } from 'bullmq';
import { describe, expect, it } from 'vitest';
import { isPermanent, steerFailure } from '../../src/jobs/failures.js';
import {
  AuthError,
  TokenMintError,
  UpstreamError,
  ValidationError,
} from '../../src/perks/errors.js';
import { InvalidPayloadError } from '../../src/queues/payloads.js';
import type { Queues } from '../../src/queues/queues.js';

describe('which failures are permanent', () => {
  it('our own bad input and the API refusing this consumer are permanent', () => {
    expect(isPermanent(new InvalidPayloadError('bad'))).toBe(true);
    expect(
      isPermanent(new ValidationError('400', { operation: 'enrollConsumer', status: 400 })),
    ).toBe(true);
    expect(isPermanent(new AuthError('403', { operation: 'enrollConsumer', status: 403 }))).toBe(
      true,
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
    const queues = {} as Queues;
    const error = new ValidationError('enrollConsumer: HTTP 400 ERR-400-00 Bad Request', {
      operation: 'enrollConsumer',
      status: 400,
    });
    await expect(steerFailure(error, queues)).rejects.toThrow(UnrecoverableError);
    await expect(steerFailure(error, queues)).rejects.toThrow(/ERR-400-00/);
  });
});
