import { defineConfig } from 'vitest/config';

// One suite, every store: each test file runs once per project, and the project picks the
// store through BATON_TEST_STORE. An unreachable PostgreSQL fails the postgres project.
export default defineConfig({
  test: {
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    projects: [
      { extends: true, test: { name: 'sqlite', env: { BATON_TEST_STORE: 'sqlite' } } },
      { extends: true, test: { name: 'postgres', env: { BATON_TEST_STORE: 'postgres' } } },
    ],
  },
});
