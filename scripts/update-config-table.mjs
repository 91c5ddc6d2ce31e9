// Rewrites docs/configuration.md's table from the variable definitions (src/config/),
// between its config-table markers. Run by `npm run docs`, after a build.
import { readFileSync, writeFileSync } from 'node:fs';
import { configTable } from '../dist/src/config.js';

const file = new URL('../docs/configuration.md', import.meta.url);
const readme = readFileSync(file, 'utf8');
const pattern = /(<!-- config-table:start -->\n)[\s\S]*?(\n<!-- config-table:end -->)/;
if (!pattern.test(readme)) {
  console.error(
    'docs/configuration.md has no <!-- config-table:start --> ... <!-- config-table:end --> block',
  );
  process.exit(1);
}
writeFileSync(
  file,
  readme.replace(pattern, (_, start, end) => `${start}${configTable()}${end}`),
);
console.log('docs/configuration.md: configuration table rewritten');
