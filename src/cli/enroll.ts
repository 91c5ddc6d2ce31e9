import { CONSENTS, type Consent, consentSchema } from '../perks/schemas.js';
import { type CommandSpec, parseCommandArgs, UsageError } from './command.js';
import { withProducer } from './producer-session.js';

const spec: CommandSpec = {
  name: 'enroll',
  summary:
    'Enqueue the enrollment of one customer. <user-id> is your own customer id: used as the\nconsumer id when it is one (2-100 of a-z A-Z 0-9 _ -), otherwise derived from it with\nPERKS_CONSUMER_ID_KEY. A running `perks-worker work` does the rest.',
  positionals: ['<user-id>'],
  options: {
    consent: { type: 'string', multiple: true },
    'remove-consent': { type: 'string', multiple: true },
  },
  help: [
    `--consent C            add an extra consent (repeatable): ${CONSENTS.join(', ')}`,
    '--remove-consent C     remove a consent (repeatable), same values',
  ],
};

function consents(values: string[] | undefined, flag: string): Consent[] {
  return (values ?? []).map((value) => {
    const parsed = consentSchema.safeParse(value);
    if (!parsed.success) {
      throw new UsageError(
        `enroll: ${flag} ${JSON.stringify(value)} is not a consent (one of ${CONSENTS.join(', ')})`,
      );
    }
    return parsed.data;
  });
}

export async function run(argv: readonly string[]): Promise<number> {
  const args = parseCommandArgs(spec, argv);
  if (!args) return 0;
  const { values, positionals } = args;
  const userId = positionals[0] ?? '';
  const extraConsents = consents(values.consent as string[] | undefined, '--consent');
  const removedConsents = consents(
    values['remove-consent'] as string[] | undefined,
    '--remove-consent',
  );
  const { consumerId, jobId, alreadyPending } = await withProducer((producer) =>
    producer.enqueueEnrollment({ userId, extraConsents, removedConsents }),
  );
  process.stdout.write(
    alreadyPending
      ? `an enrollment of ${JSON.stringify(userId)} as consumer ${consumerId} is already pending (job ${jobId}); not enqueued again\n`
      : `enqueued enrollment of ${JSON.stringify(userId)} as consumer ${consumerId} (job ${jobId})\n`,
  );
  return 0;
}
