/** Applies the datastore migrations to the template database (a no-op until they exist). */
export async function migrateTemplate(_url: string): Promise<void> {}
