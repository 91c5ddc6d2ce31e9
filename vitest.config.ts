import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/support/global-setup.ts'],
    // Files run in parallel: each integration file has its own database and queue prefix.
    pool: 'forks',
    // Files mostly wait (on Redis, PostgreSQL, timers, child processes): four at once take the
    // run on 2 cores from about 7 minutes to 3, where the default (cores - 1) runs one.
    maxWorkers: 4,
    testTimeout: 30_000,
    hookTimeout: 60_000,
    reporters: ['default'],
  },
});
