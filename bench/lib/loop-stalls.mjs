// Loaded into a benchmark's server process (`node --import ./bench/lib/loop-stalls.mjs`, which
// bench/healthz-load.ts adds when BENCH_LOOP_STALLS names a file): each time the main thread's
// event loop was held over 30 ms, one JSON line in that file with when it ended (`at`, epoch ms),
// how long (`ms`), and how much of it the thread spent on a CPU (`cpu`) and waiting in the
// kernel's run queue for one (`wait`), from Linux's per-thread schedstat. The rest of a stall is
// time the thread slept (blocked in a system call or on a lock). A stall mostly `cpu` is work
// the server did on its loop; mostly `wait` is a core taken by other threads or processes.
import { appendFileSync, readFileSync } from 'node:fs';
import { isMainThread } from 'node:worker_threads';

const out = process.env.BENCH_LOOP_STALLS;
if (isMainThread && out) {
  const path = `/proc/self/task/${process.pid}/schedstat`;
  const sched = () => {
    try {
      return readFileSync(path, 'utf8').split(' ').map(Number);
    } catch {
      return [0, 0]; // not Linux: stalls without the split
    }
  };
  let last = performance.now();
  let [run0, wait0] = sched();
  setInterval(() => {
    const now = performance.now();
    const [run, wait] = sched();
    if (now - last > 30) {
      const line = {
        at: Date.now(),
        ms: +(now - last).toFixed(1),
        cpu: +((run - run0) / 1e6).toFixed(1),
        wait: +((wait - wait0) / 1e6).toFixed(1),
      };
      appendFileSync(out, JSON.stringify(line) + '\n');
    }
    last = now;
    run0 = run;
    wait0 = wait;
  }, 2).unref();
}
