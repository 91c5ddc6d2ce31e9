/**
 * Run by migrate.test.ts in a child process:
 * `node --import tsx migrate-child.ts <url> <schema> <start-at-epoch-ms>`.
 * Both children wait for the same instant, once loaded, so that their migrations really race.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { migrate } from '../../../src/store/migrate.js';

const [url, schema, startAt] = process.argv.slice(2);
if (!url || !schema || !startAt) throw new Error('usage: migrate-child.ts <url> <schema> <at>');
await sleep(Math.max(0, Number(startAt) - Date.now()));
const result = await migrate({ databaseUrl: url, schema });
process.stdout.write(`${JSON.stringify(result)}\n`);
