// Rewrites the README's configuration table from the variable definitions (src/config/),
// between its config-table markers. Run by `npm run docs`, after a build.
import { readFileSync, writeFileSync } from 'node:fs';
import { configTable } from '../dist/src/config.js';

const file = new URL('../README.md', import.meta.url);
const readme = readFileSync(file, 'utf8');
const pattern = /(<!-- config-table:start -->\n)[\s\S]*?(\n<!-- config-table:end -->)/;
if (!pattern.test(readme)) {
  console.error('README.md has no <!-- config-table:start --> ... <!-- config-table:end --> block');
  process.exit(1);
}
writeFileSync(
  file,
  readme.replace(pattern, (_, start, end) => `${start}${configTable()}${end}`),
);
console.log('README.md: configuration table rewritten');
