import { CONSENTS, type Consent, consentSchema } from '../perks/schemas.js';
import { type CommandSpec, parseCommandArgs, UsageError } from './command.js';
import { enrollFromFile } from './enroll-file.js';
import { formatOfPath, type InputFormat, inputFormats } from './enroll-input.js';
import { producerGroups, withProducer } from './producer-session.js';

const spec: CommandSpec = {
  name: 'enroll',
  config: producerGroups,
  summary: [
    'Enqueue the enrollment of one customer. <user-id> is your own customer id: used as the',
    'consumer id when it is one (2-100 of a-z A-Z 0-9 _ -), otherwise derived from it with',
    'PERKS_CONSUMER_ID_KEY. A running `perks-worker work` does the rest.',
    '',
    'With --file (and no <user-id>), enqueue many: CSV with a header naming user_id and',
    'optionally extra_consents and removed_consents (consents `;`-separated), or JSON Lines',
    '({"user_id": "...", "extra_consents": ["TARGETING"]}). A consumer whose enrollment is',
    'pending is not enqueued twice, so a rerun after an interruption does no harm. Bad lines',
    'are reported on stderr (`line 17: user_id: must not be empty`) and skipped. Exit status:',
    '0; 1 when a line was bad or, with --wait, an enrollment failed; 130 when interrupted.',
  ].join('\n'),
  positionals: ['<user-id>'],
  options: {
    consent: { type: 'string', multiple: true },
    'remove-consent': { type: 'string', multiple: true },
    file: { type: 'string' },
    format: { type: 'string' },
    wait: { type: 'boolean' },
  },
  help: [
    `--consent C            add an extra consent (repeatable): ${CONSENTS.join(', ')}`,
    '--remove-consent C     remove a consent (repeatable), same values',
    '--file PATH            enroll every record of a CSV or JSON Lines file; - reads stdin',
    '--format csv|jsonl     default: by extension (.csv .jsonl .ndjson), else jsonl if it starts with {',
    '--wait                 follow the enrollments to their end and print what became of them',
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

/** `--format`, else the file's extension, else undefined: told from the first character. */
function formatOf(file: string, format: string | undefined): InputFormat | undefined {
  if (format === undefined) return file === '-' ? undefined : formatOfPath(file);
  if ((inputFormats as readonly string[]).includes(format)) return format as InputFormat;
  throw new UsageError(`enroll: --format must be csv or jsonl, got ${JSON.stringify(format)}`);
}

export async function run(argv: readonly string[]): Promise<number> {
  // <user-id> is required unless --file is given: CommandSpec has no optional positional.
  const bulk = argv.some((arg) => arg === '--file' || arg.startsWith('--file='));
  const args = parseCommandArgs(bulk ? { ...spec, positionals: [] } : spec, argv);
  if (!args) return 0;
  const { values, positionals } = args;
  if (values.file !== undefined) {
    if (values.consent !== undefined || values['remove-consent'] !== undefined) {
      throw new UsageError(
        'enroll: --consent and --remove-consent are for one <user-id>; with --file, give consents in the file',
      );
    }
    const file = values.file as string;
    return enrollFromFile({
      file,
      format: formatOf(file, values.format as string | undefined),
      wait: values.wait === true,
    });
  }
  if (values.format !== undefined || values.wait !== undefined) {
    throw new UsageError('enroll: --format and --wait go with --file');
  }
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
