import { migrate } from '../../src/store/migrate.js';

/**
 * Applies the datastore migrations to the template database with the default schema, so
 * every test file's cloned database is already migrated.
 */
export async function migrateTemplate(url: string): Promise<void> {
  await migrate({ databaseUrl: url, schema: 'perks' });
}
