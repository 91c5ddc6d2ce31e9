// tsc emits only .js: copy the SQL migrations next to the compiled store, so that
// dist/src/store/migrate.js finds them at the same relative path as the sources do.
import { cpSync } from 'node:fs';

cpSync('src/store/migrations', 'dist/src/store/migrations', { recursive: true });
