// A build starts from an empty dist/, so that a module removed or moved in src/ is not
// shipped (package.json `files`) or imported from a stale copy.
import { rmSync } from 'node:fs';

rmSync('dist', { recursive: true, force: true });
