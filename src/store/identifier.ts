/** SQL identifiers cannot be bound as parameters. DATABASE_SCHEMA's rule (pg_ is reserved): */
export const schemaPattern = /^(?!pg_)[a-z_][a-z0-9_]{0,62}$/;

export function assertSchemaName(schema: string): string {
  if (!schemaPattern.test(schema)) {
    throw new TypeError(
      `invalid schema name ${JSON.stringify(schema)}: must match ${schemaPattern.source}`,
    );
  }
  return schema;
}

/** Any identifier (database names are not validated). */
export function quoteIdentifier(name: string): string {
  if (name.length === 0 || name.includes('\0')) {
    throw new TypeError('an SQL identifier must be non-empty and free of NUL characters');
  }
  return `"${name.replaceAll('"', '""')}"`;
}
