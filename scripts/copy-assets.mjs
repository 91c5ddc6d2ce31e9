// tsc only emits .js from .ts: copy the SQL migrations next to the compiled store so that
// `dist/src/store/migrate.js` finds them at the same relative path as the sources do, and the
// HTTP thread's script (plain JavaScript, loaded by path) next to http-thread.js.
import { cpSync } from 'node:fs';

cpSync('src/store/migrations', 'dist/src/store/migrations', { recursive: true });
cpSync('src/perks/http-thread-worker.mjs', 'dist/src/perks/http-thread-worker.mjs');
