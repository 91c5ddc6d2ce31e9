import { loadConfig } from '../config.js';
import { OperationalError } from '../errors.js';
import { createLogger } from '../ops/logger.js';
import { migrate } from '../store/migrate.js';
import { say } from './report.js';

export async function run(): Promise<number> {
  const config = loadConfig(['database', 'log']);
  // The lines below say what happened: the logger adds warnings, or what LOG_LEVEL asks for.
  const logger = createLogger(config.log, { command: 'migrate' });
  const quiet = config.log.level === 'info' ? logger.child({}, { level: 'warn' }) : logger;
  const schema = config.database.schema;
  // Direct when given: only there can a missing database be created (src/store/migrate.ts).
  const databaseUrl = config.database.directUrl ?? config.database.url;

  const result = await migrate({ databaseUrl, schema, logger: quiet }).catch((error: unknown) => {
    if (error instanceof OperationalError) return error;
    throw error;
  });
  if (result instanceof OperationalError) {
    process.stderr.write(`perks-worker: migrate: ${result.message}\n`);
    return 1;
  }
  const database = decodeURIComponent(new URL(databaseUrl).pathname.slice(1));
  const { count } = result;
  say(
    ...(result.databaseCreated ? [`created database ${database}`] : []),
    ...result.applied.map((file) => `applied ${file}`),
    `schema ${schema} is at ${result.current} (${count} migration${count === 1 ? '' : 's'})`,
  );
  return 0;
}
