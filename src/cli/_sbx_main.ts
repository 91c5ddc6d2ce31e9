import { run } from './sandbox.js';
process.exitCode = await run(process.argv.slice(2));
