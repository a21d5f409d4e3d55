/**
 * Run before each test file, in the worker that runs it (Vitest's setupFiles). The files a worker
 * runs share one process and its modules (`isolate: false`, vitest.config.ts), so what must hold
 * per file is set here, not at the top of a helper module, which runs once per worker.
 */
import { afterEach } from 'vitest';
import { thisFile } from '../helpers/store.ts';

// A file whose test failed keeps its store for inspection (openTestStore's cleanup).
thisFile.failed = false;
afterEach((ctx) => {
  if (ctx.task.result?.state === 'fail') thisFile.failed = true;
});
