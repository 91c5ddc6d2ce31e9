/**
 * docs/datastore.md lists every table and column the migrations create, and the README names
 * every table.
 */
import { readFileSync } from 'node:fs';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../support/database.js';

const doc = readFileSync(new URL('../../docs/datastore.md', import.meta.url), 'utf8');
const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');

/** The section of one table in docs/datastore.md: from its heading to the next heading. */
function section(table: string): string {
  const start = doc.indexOf(`### \`perks.${table}\``);
  if (start < 0) return '';
  const next = doc.indexOf('\n#', start + 1);
  return doc.slice(start, next < 0 ? undefined : next);
}

describe('datastore contract', () => {
  let db: TestDatabase;
  let columns: { table: string; column: string }[] = [];
  beforeAll(async () => {
    db = await createTestDatabase();
    const client = new pg.Client(db.url);
    await client.connect();
    const { rows } = await client.query<{ table: string; column: string }>(
      `select table_name as table, column_name as column from information_schema.columns
        where table_schema = 'perks' order by table_name, ordinal_position`,
    );
    await client.end();
    columns = rows;
  });
  afterAll(() => db.drop());

  it('documents every table and column', () => {
    expect(columns.length).toBeGreaterThan(30);
    const undocumented = columns.filter(
      ({ table, column }) => !new RegExp(`^\\| \`${column}\` +\\|`, 'm').test(section(table)),
    );
    expect(undocumented).toEqual([]);
  });

  it('names every table in the README', () => {
    const tables = [...new Set(columns.map((c) => c.table))];
    const named = (table: string) => new RegExp(`^\\| [^|\\n]*\`perks\\.${table}\``, 'm');
    expect(tables.filter((table) => !named(table).test(readme))).toEqual([]);
  });
});
