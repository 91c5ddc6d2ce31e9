import { loadConfig } from '../config.js';
import { type InputError, UsageError } from '../errors.js';
import { checkSignup } from '../intake/signups.js';
import type { Consent } from '../perks/schemas.js';
import { ConsumerIdKeyMissingError, consumerIdKeyWarning } from '../queues/consumer-id.js';
import { describeProblems, InvalidPayloadError, type Problem } from '../queues/payloads.js';
import { type EnqueuedEnrollment, enqueueEnrollments } from '../queues/producer.js';
import { enrollFromFile } from './enroll-file.js';
import type { InputFormat } from './enroll-input.js';
import { withProducer } from './producer-session.js';
import { producerGroups } from './program.js';

export async function run(
  userId: string | undefined,
  options: {
    consent?: Consent[];
    removeConsent?: Consent[];
    file?: string;
    format?: InputFormat;
    wait?: boolean;
  },
): Promise<number> {
  const { file, format, wait } = options;
  // Ids derived under a weak key are guessable: said here as `work` and `check` say it.
  const weak = consumerIdKeyWarning(loadConfig(['consumerIds']).consumerIds.key);
  if (weak) process.stderr.write(`perks-worker: warning: ${weak}\n`);
  if (file !== undefined) {
    if (userId !== undefined)
      throw new UsageError(`enroll: unexpected argument ${JSON.stringify(userId)}`);
    if (options.consent || options.removeConsent) {
      throw new UsageError(
        'enroll: --consent and --remove-consent are for one <user-id>; with --file, give consents in the file',
      );
    }
    return enrollFromFile(file, format, wait);
  }
  if (format !== undefined || wait !== undefined) {
    throw new UsageError('enroll: --format and --wait go with --file');
  }
  if (userId === undefined) throw new UsageError('enroll: missing <user-id>');
  // The signup every door takes, checked before Redis is reached.
  const config = loadConfig(producerGroups);
  const { consent: extra_consents = [], removeConsent: removed_consents = [] } = options;
  const signup = { user_id: userId, extra_consents, removed_consents };
  const checked = checkSignup(signup, config.consumerIds.key);
  if (!checked.ok) throw signupError(checked.problems);
  const [{ consumerId, jobId, alreadyPending }] = (await withProducer(
    ({ queues }) => enqueueEnrollments(queues, [checked.value]),
    config,
  )) as [EnqueuedEnrollment];
  process.stdout.write(
    alreadyPending
      ? `an enrollment of ${JSON.stringify(userId)} as consumer ${consumerId} is already pending (job ${jobId}); not enqueued again\n`
      : `enqueued enrollment of ${JSON.stringify(userId)} as consumer ${consumerId} (job ${jobId})\n`,
  );
  return 0;
}

function signupError(problems: readonly Problem[]): InputError {
  if (problems[0]?.message === ConsumerIdKeyMissingError.problem) {
    return new ConsumerIdKeyMissingError('userId');
  }
  // Named as the producer API names the field (`userId`), as `enroll` always has.
  const named = problems.map(({ field, message }) => ({
    field: field.replace(/_(\w)/g, (_, letter: string) => letter.toUpperCase()),
    message,
  }));
  return new InvalidPayloadError(`invalid enrollment payload: ${describeProblems(named)}`);
}
