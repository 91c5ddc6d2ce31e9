import { Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { checkRecord } from '../../src/cli/enroll-file.js';
import { followSummary } from '../../src/cli/enroll-follow.js';
import {
  EnrollmentInputError,
  formatOfPath,
  type InputFormat,
  type InputRecord,
  readRecords,
} from '../../src/cli/enroll-input.js';

/** Every record of `text`, read in chunks of `chunk` characters (records span chunks). */
async function read(text: string, format: InputFormat, chunk = 7): Promise<InputRecord[]> {
  const chunks: string[] = [];
  for (let i = 0; i < text.length; i += chunk) chunks.push(text.slice(i, i + chunk));
  const records: InputRecord[] = [];
  for await (const record of readRecords(Readable.from(chunks), format)) records.push(record);
  return records;
}

describe('enroll --file CSV', () => {
  it('reads records with their line numbers, a BOM, quotes and ;-separated consents', async () => {
    const text =
      '\uFEFFuser_id, extra_consents ,removed_consents\r\n' +
      'a1,TARGETING; STATISTICS;,\r\n' +
      '\r\n' +
      '"b,2","",WEB_ANALYTICS\r\n' +
      '"multi\nline",, \r\n';
    expect(await read(text, 'csv')).toEqual([
      { line: 2, payload: { user_id: 'a1', extra_consents: ['TARGETING', 'STATISTICS'] } },
      { line: 4, payload: { user_id: 'b,2', removed_consents: ['WEB_ANALYTICS'] } },
      { line: 6, payload: { user_id: 'multi\nline' } },
    ]);
  });

  it('reports a record of the wrong length or an unclosed quote by line, in line order', async () => {
    const text = 'user_id,extra_consents\na1,,extra\na2\na3,BASIC\nx"y,BASIC\n"open,\na9,\na10,\n';
    expect(await read(text, 'csv')).toEqual([
      { line: 2, problem: 'expected 2 fields as in the header, got 3' },
      { line: 3, problem: 'expected 2 fields as in the header, got 1' },
      { line: 4, payload: { user_id: 'a3', extra_consents: ['BASIC'] } },
      // A stray quote inside a field is kept as it is, not an error that eats what follows.
      { line: 5, payload: { user_id: 'x"y', extra_consents: ['BASIC'] } },
      // One that opens a field and never closes takes the lines after it: they are named.
      {
        line: 6,
        problem:
          'a quote opened in this record is never closed: every line from here to the end was read as one field, not as records; close it and run again',
      },
    ]);
  });

  it('refuses a header without user_id, or with a column it does not read', async () => {
    await expect(read('id,extra_consents\na,b\n', 'csv')).rejects.toThrow(
      new EnrollmentInputError(
        'line 1: the CSV header must name a user_id column (got "id", "extra_consents")',
      ),
    );
    await expect(read('user_id,consents\na,b\n', 'csv')).rejects.toThrow(
      'line 1: "consents" is not a column enroll reads (user_id, extra_consents, removed_consents)',
    );
  });
});

describe('enroll --file JSON Lines', () => {
  it('reads signups, consents as arrays or strings, and names what is wrong by line', async () => {
    const text = [
      '\uFEFF{"user_id":"j1","extra_consents":["TARGETING"]}',
      '',
      '{"user_id":"j2","removed_consents":"BASIC;STATISTICS"}',
      '{"user_id":"j3",',
      '"j4"',
      '{"extra_consents":[]}',
      '{"user_id":"j5","consents":[]}',
    ].join('\n');
    const records = await read(text, 'jsonl');
    const checked = records.map((r) => checkRecord(r, undefined));
    expect(checked.map((r) => (r.ok ? r.enrollment : r.problem.replace(/ \(.*/, '')))).toEqual([
      { userId: 'j1', consumerId: 'j1', extraConsents: ['TARGETING'] },
      { userId: 'j2', consumerId: 'j2', removedConsents: ['BASIC', 'STATISTICS'] },
      'not valid JSON',
      'must be a JSON object with a user_id',
      'user_id: is required',
      'consents: is not a known field',
    ]);
    expect(records.slice(2).map((r) => r.line)).toEqual([4, 5, 6, 7]);
  });
});

describe('enroll --file records', () => {
  const check = (payload: Record<string, unknown>, key?: string) =>
    checkRecord({ line: 1, payload }, key);

  it("names the input's field with the signup check's message", () => {
    expect(check({ user_id: '' })).toEqual({ ok: false, problem: 'user_id: must not be empty' });
    expect(check({ user_id: 'a1', extra_consents: ['BASIC', 'NOPE'] })).toMatchObject({
      ok: false,
      problem: expect.stringMatching(/^extra_consents\[1\]: Invalid option: expected one of /),
    });
    expect(check({ user_id: 7 })).toEqual({ ok: false, problem: 'user_id: must be a string' });
    // Added and removed: no enrollment can satisfy it, so it is refused like any bad field.
    expect(
      check({ user_id: 'a1', extra_consents: ['BASIC'], removed_consents: ['BASIC'] }),
    ).toEqual({ ok: false, problem: 'removed_consents: BASIC is also an extra consent' });
    expect(check({ user_id: 'x'.repeat(257) })).toEqual({
      ok: false,
      problem: 'user_id: must be at most 256 characters',
    });
    // PostgreSQL stores neither: refused here, not after the consumer is enrolled upstream.
    for (const user_id of ['abc\u0000def', 'abc\ud800', '\udc00abc']) {
      expect(check({ user_id })).toEqual({
        ok: false,
        problem: 'user_id: must not contain a NUL character or an unpaired surrogate',
      });
    }
    // A pair is a character like any other: refused only as a consumer id with no key to derive.
    expect(check({ user_id: 'emoji_\ud83d\ude00' })).toMatchObject({
      problem: expect.stringMatching(/PERKS_CONSUMER_ID_KEY is not set$/),
    });
  });

  it('derives the consumer id of a user id that is not one, or says the key is missing', () => {
    expect(check({ user_id: 'ann@example.com' })).toEqual({
      ok: false,
      problem: expect.stringMatching(/^user_id: .* PERKS_CONSUMER_ID_KEY is not set$/),
    });
    const derived = check({ user_id: 'ann@example.com' }, 'k'.repeat(32));
    expect(derived).toMatchObject({
      ok: true,
      enrollment: { consumerId: expect.stringMatching(/^u_[a-z2-7]{52}$/) },
    });
    expect(check({ user_id: 'ann_1' })).toEqual({
      ok: true,
      enrollment: { userId: 'ann_1', consumerId: 'ann_1' },
    });
  });

  it('tells the format from the extension', () => {
    expect(formatOfPath('/x/Signups.CSV')).toBe('csv');
    expect(formatOfPath('a.ndjson')).toBe('jsonl');
    expect(formatOfPath('a.txt')).toBeUndefined();
  });
});

describe('enroll --wait summary', () => {
  const ended = {
    created: 5,
    alreadyEnrolled: 2,
    failed: 0,
    unknown: 0,
    failures: new Map<string, number>(),
    permanent: 0,
    workerSeen: true,
    pending: 0,
  };

  it('groups failures by reason, most frequent first, the rest summed', () => {
    const failures = new Map<string, number>([
      ['rare', 1],
      ['common', 30],
    ]);
    for (let i = 0; i < 10; i++) failures.set(`other ${i}`, 2);
    const lines = followSummary({ ...ended, failed: 51, failures, permanent: 0 }, 58);
    expect(lines[0]).toBe('followed 58 enrollments: created 5, already enrolled 2, failed 51');
    expect(lines.slice(1, 3)).toEqual(['failed 51, by reason:', '  30  common']);
    expect(lines[12]).toBe('   3  (2 other reasons)');
    expect(lines[13]).toBe(
      "each failed job is listed by 'perks-worker failed' and can be retried there",
    );
  });

  it('offers only the jobs that failed for a passing cause for retry', () => {
    const failures = new Map([['removedConsents: BASIC is also an extra consent', 2]]);
    const permanent = followSummary({ ...ended, failed: 2, failures, permanent: 2 }, 9);
    expect(permanent.at(-1)).toBe(
      '2 failed permanently: retrying cannot help (fix the cause, enroll again)',
    );
    failures.set('enrollConsumer: HTTP 503', 1);
    const mixed = followSummary({ ...ended, failed: 3, failures, permanent: 2 }, 10);
    expect(mixed.slice(-2)).toEqual([
      '2 failed permanently: retrying cannot help (fix the cause, enroll again)',
      "the other 1 is listed by 'perks-worker failed' and can be retried there",
    ]);
  });

  it('says on Ctrl-C whether a worker has the pending ones in hand', () => {
    const stopped = { ...ended, created: 0, alreadyEnrolled: 0, pending: 4 };
    expect(followSummary({ ...stopped, workerSeen: false }, 4)[0]).toBe(
      'stopped following: 0 of 4 enrollments ended (created 0, already enrolled 0, failed 0), 4 still pending; no worker has started one: they wait for perks-worker work',
    );
    expect(followSummary(stopped, 4)[0]).toMatch(/; they go on in the worker$/);
  });
});
