import { type ConfigGroup, loadConfig } from '../config.js';

/**
 * Placeholder for a command whose issue has not landed: it still validates the environment
 * the command will need, so configuration mistakes show up today, then says so plainly.
 */
export function notBuilt(name: string, groups: readonly ConfigGroup[]) {
  return {
    async run(): Promise<number> {
      loadConfig(groups);
      process.stderr.write(`perks-worker: '${name}' is not built yet (see the issue tracker).\n`);
      return 3;
    },
  };
}
