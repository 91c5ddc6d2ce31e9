/**
 * The input of `enroll --file`: CSV (a header naming signup fields, consents `;`-separated) or
 * JSON Lines (one signup a line, consents an array or `;`-separated). Read as a stream, a record
 * at a time with its line number: a signup for checkSignup, or what makes it a bad line.
 */
import { once } from 'node:events';
import { extname } from 'node:path';
import { createInterface } from 'node:readline';
import type { Readable } from 'node:stream';
import { type CsvError, parse } from 'csv-parse';
import { signupFields } from '../intake/signups.js';

export const inputFormats = ['csv', 'jsonl'] as const;
export type InputFormat = (typeof inputFormats)[number];

/** A record of the input: its (last) line number, and its signup or what is wrong with it. */
export type InputRecord = { line: number; payload: object } | { line: number; problem: string };

/** The input cannot be read at all (a CSV header without user_id): no record is usable. */
export class EnrollmentInputError extends Error {
  override readonly name = 'EnrollmentInputError';
}

/** The format named by a file's extension, or undefined (stdin, another extension). */
export function formatOfPath(path: string): InputFormat | undefined {
  const ext = extname(path).toLowerCase();
  if (ext === '.csv') return 'csv';
  if (ext === '.jsonl' || ext === '.ndjson') return 'jsonl';
  return undefined;
}

/** JSON Lines when the first character (after a BOM and blanks) is `{`, else CSV; read, put back. */
export async function sniffFormat(input: Readable): Promise<InputFormat> {
  await once(input, 'readable');
  const chunk = input.read() as Buffer | string | null;
  if (chunk === null) return 'csv';
  input.unshift(chunk);
  const text = chunk.toString().replace(/^\uFEFF/, '');
  return text.trimStart().startsWith('{') ? 'jsonl' : 'csv';
}

export function readRecords(input: Readable, format: InputFormat): AsyncGenerator<InputRecord> {
  return format === 'csv' ? readCsv(input) : readJsonLines(input);
}

/** Consents given as `A;B` split (blanks around and empty parts ignored); empty ones dropped. */
export function signupOf(fields: Record<string, unknown>): object {
  const signup = { ...fields };
  for (const name of ['extra_consents', 'removed_consents']) {
    const value = signup[name];
    const parts = typeof value === 'string' ? value.split(';').map((part) => part.trim()) : [];
    const consents = typeof value === 'string' ? parts.filter((part) => part !== '') : value;
    if (consents == null || (Array.isArray(consents) && consents.length === 0)) delete signup[name];
    else signup[name] = consents;
  }
  return signup;
}

async function* readCsv(input: Readable): AsyncGenerator<InputRecord> {
  const skipped: InputRecord[] = [];
  // The line of the last record read: where a quote that is never closed began, at the latest.
  let lastRecordLine = 1;
  const parser = input.pipe(
    parse({
      bom: true,
      columns: checkHeader,
      info: true,
      skip_empty_lines: true,
      // A stray quote inside a field is taken as it is; a field that opens with a quote and
      // never closes it takes the rest of the input, reported as such (csvProblem).
      relax_quotes: true,
      // A malformed record (a stray quote, a wrong number of fields) is reported, not fatal.
      skip_records_with_error: true,
      // The parser reads ahead of the loop below: it knows the last record's line first.
      on_record: (record, context) => {
        lastRecordLine = context.lines;
        return record;
      },
      on_skip: (error) => {
        if (error)
          skipped.push(
            // Reported where the unclosed quote's record begins, not where the input ends.
            error.code === 'CSV_QUOTE_NOT_CLOSED'
              ? { line: lastRecordLine + 1, problem: unclosedQuote }
              : { line: Number(error.lines ?? 0), problem: csvProblem(error) },
          );
        return undefined;
      },
    }),
  );
  input.on('error', (error) => parser.destroy(error));
  try {
    for await (const { record, info } of parser as AsyncIterable<{
      record: Record<string, string>;
      info: { lines: number };
    }>) {
      // Skips are reported while the parser reads ahead: keep the report in line order.
      while ((skipped[0]?.line ?? Number.POSITIVE_INFINITY) < info.lines) {
        yield skipped.shift() as InputRecord;
      }
      yield { line: info.lines, payload: signupOf(record) };
    }
  } catch (error) {
    // A bad header is thrown from `checkHeader` and comes back wrapped by the parser.
    const cause = error instanceof EnrollmentInputError ? error : (error as Error).cause;
    if (cause instanceof EnrollmentInputError) throw cause;
    throw error;
  }
  yield* skipped.splice(0);
}

function checkHeader(header: string[]): string[] {
  const names = header.map((name) => name.trim());
  if (!names.includes('user_id')) {
    throw new EnrollmentInputError(
      `line 1: the CSV header must name a user_id column (got ${names.map((n) => JSON.stringify(n)).join(', ')})`,
    );
  }
  const unknown = names.find((name) => !signupFields.includes(name));
  if (unknown !== undefined) {
    throw new EnrollmentInputError(
      `line 1: ${JSON.stringify(unknown)} is not a column enroll reads (${signupFields.join(', ')})`,
    );
  }
  return names;
}

const unclosedQuote =
  'a quote opened in this record is never closed: every line from here to the end was read as one field, not as records; close it and run again';

/** csv-parse's message without its own "at line N" (the report starts with the line). */
function csvProblem(error: CsvError): string {
  const { columns, record } = error;
  if (
    error.code === 'CSV_RECORD_INCONSISTENT_COLUMNS' &&
    Array.isArray(columns) &&
    Array.isArray(record)
  ) {
    return `expected ${columns.length} fields as in the header, got ${record.length}`;
  }
  return `not valid CSV (${error.message.replace(/ (at|on) line \d+/, '')})`;
}

async function* readJsonLines(input: Readable): AsyncGenerator<InputRecord> {
  const lines = createInterface({ input, crlfDelay: Number.POSITIVE_INFINITY });
  let line = 0;
  for await (const raw of lines) {
    line += 1;
    const text = (line === 1 ? raw.replace(/^\uFEFF/, '') : raw).trim();
    if (text === '') continue;
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (error) {
      yield { line, problem: `not valid JSON (${(error as Error).message})` };
      continue;
    }
    if (typeof value !== 'object' || value === null || Array.isArray(value)) {
      yield { line, problem: 'must be a JSON object with a user_id' };
      continue;
    }
    yield { line, payload: signupOf(value as Record<string, unknown>) };
  }
}
