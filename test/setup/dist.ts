/**
 * Vitest's global setup for every project: dist/ brought up to date with src/ and test/fixtures/
 * (scripts/dist.ts) before any test file runs, and again before each rerun in watch mode, so the
 * processes the tests start (test/helpers/baton.js, the fixtures) never run a stale build.
 */
import type { TestProject } from 'vitest/node';
import { buildForTests } from '../../scripts/dist.ts';

function build(): void {
  const { written, removed, ms } = buildForTests();
  if (written + removed > 0) console.log(`dist/: ${written} file(s) written, ${removed} removed (${ms} ms)`);
}

export default function setup(project: TestProject): void {
  build();
  project.onTestsRerun(() => build());
}
