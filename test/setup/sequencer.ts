/**
 * The order `vitest run` hands test files to its workers: the long files first, across all four
 * projects, so the run does not end on one long file while the other workers sit idle; then the
 * rest project by project, larger first, so a worker mostly takes its next file from the project it
 * just ran one of and runs it in the same process (Vitest reuses a worker's process only for a file
 * of the same project, vitest.config.ts `isolate: false`; one of another project starts a new one).
 *
 * A file's expected length is Vitest's own record of its last run when the machine has one
 * (node_modules/.vite/vitest: local reruns); a fresh checkout (CI: `npm ci` empties node_modules)
 * has none, and Vitest's own order would put the reverse-proxy test (a small file that waits out
 * 60 s long polls) at the very end. So the files whose length is set by what they wait for, not by
 * their size, are named below. Files failed last time still run first.
 */
import { relative } from 'node:path';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/** Seconds a file takes on an idle 2-core machine, for the files whose size says nothing of it. */
const KNOWN: Record<string, number> = {
  // 600 + 60 workers hold 60 s long polls through nginx and Caddy, on each store.
  'sqlite:test/server/proxies.test.ts': 65,
  'postgres:test/server/proxies.test.ts': 65,
  // Six claimer processes drain 3,000 executions (PostgreSQL only).
  'postgres:test/engine/multiprocess.test.ts': 55,
  // Packs and installs both packages (test/helpers/packages.ts); the sqlite project's copy of the
  // file waits for that install, so only one of the two goes early.
  'postgres:test/server/package.test.ts': 60,
};

/** Files expected to take at least this many seconds go first, whatever their project. */
const LONG = 20;

export default class LongestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const { cache, config } = this.ctx;
    const facts = new Map(
      files.map((spec) => {
        const key = `${spec.project.name}:${relative(config.root, spec.moduleId)}`;
        const last = cache.getFileTestResults(key);
        const seconds = last ? last.duration / 1000 : (KNOWN[key] ?? 0);
        return [spec, { failed: last?.failed ?? false, seconds, size: cache.getFileStats(key)?.size ?? 0 }];
      }),
    );
    // The projects in vitest.config.ts's order.
    const order = this.ctx.projects.map((p) => p.name);
    return [...files].sort((a, b) => {
      const [fa, fb] = [facts.get(a)!, facts.get(b)!];
      if (fa.failed !== fb.failed) return fa.failed ? -1 : 1;
      const [la, lb] = [fa.seconds >= LONG, fb.seconds >= LONG];
      if (la !== lb) return la ? -1 : 1;
      if (!la && a.project.name !== b.project.name) return order.indexOf(a.project.name) - order.indexOf(b.project.name);
      return fb.seconds - fa.seconds || fb.size - fa.size;
    });
  }
}
