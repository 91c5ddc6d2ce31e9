import { UsageError } from '../errors.js';
import type { Consent } from '../perks/schemas.js';
import { enrollFromFile } from './enroll-file.js';
import { formatOfPath, type InputFormat } from './enroll-input.js';
import { withProducer } from './producer-session.js';

export interface EnrollOptions {
  consent?: Consent[];
  removeConsent?: Consent[];
  file?: string;
  format?: InputFormat;
  wait?: boolean;
}

export async function run(userId: string | undefined, options: EnrollOptions): Promise<number> {
  const { file, format, wait = false } = options;
  if (file !== undefined) {
    if (userId !== undefined)
      throw new UsageError(`enroll: unexpected argument ${JSON.stringify(userId)}`);
    if (options.consent || options.removeConsent) {
      throw new UsageError(
        'enroll: --consent and --remove-consent are for one <user-id>; with --file, give consents in the file',
      );
    }
    // Without --format or a known extension, the first character tells.
    return enrollFromFile({
      file,
      format: format ?? (file === '-' ? undefined : formatOfPath(file)),
      wait,
    });
  }
  if (format !== undefined || options.wait !== undefined) {
    throw new UsageError('enroll: --format and --wait go with --file');
  }
  if (userId === undefined) throw new UsageError('enroll: missing <user-id>');
  const { consumerId, jobId, alreadyPending } = await withProducer((producer) =>
    producer.enqueueEnrollment({
      userId,
      extraConsents: options.consent ?? [],
      removedConsents: options.removeConsent ?? [],
    }),
  );
  process.stdout.write(
    alreadyPending
      ? `an enrollment of ${JSON.stringify(userId)} as consumer ${consumerId} is already pending (job ${jobId}); not enqueued again\n`
      : `enqueued enrollment of ${JSON.stringify(userId)} as consumer ${consumerId} (job ${jobId})\n`,
  );
  return 0;
}
