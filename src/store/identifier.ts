/** SQL identifiers cannot be bound as parameters: validated and quoted here, once. */

/** The same rule as DATABASE_SCHEMA in config.ts: a lower-case, unquoted-safe identifier. */
const schemaPattern = /^[a-z_][a-z0-9_]{0,62}$/;

export function assertSchemaName(schema: string): string {
  if (!schemaPattern.test(schema)) {
    throw new TypeError(
      `invalid schema name ${JSON.stringify(schema)}: must match ${schemaPattern.source}`,
    );
  }
  return schema;
}

/** Double-quotes any identifier, doubling embedded quotes (database names are not validated). */
export function quoteIdentifier(name: string): string {
  if (name.length === 0 || name.includes('\0')) {
    throw new TypeError('an SQL identifier must be non-empty and free of NUL characters');
  }
  return `"${name.replaceAll('"', '""')}"`;
}
