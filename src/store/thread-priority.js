// Lowers the scheduling priority of the worker thread that calls it (Linux `nice`, per thread).
// Plain JavaScript, so every worker loads it (src/engine/json-worker.js, sqlite-reader-worker.js).
import { readlinkSync } from 'node:fs';
import { getPriority, setPriority } from 'node:os';

/**
 * The nice value of Baton's worker threads. They do the bulk work of large requests (decoding
 * and checking megabytes of JSON, long SQLite reads and writes) while the event loop answers
 * every request: on a host with fewer free cores than busy threads, the kernel otherwise shares a
 * core between the loop and a busy worker, and a request the loop could answer in a millisecond
 * waits for the worker's time slice. At 10 the loop takes a core first whenever it has work,
 * while the workers still get about a tenth of a contended core (a worker is never starved: the
 * loop waits on them, and then leaves its core to them).
 */
export const WORKER_THREAD_NICE = 10;

/** Lower this thread's priority to WORKER_THREAD_NICE (never raise it); no-op where threads have no id in /proc (not Linux). */
export function lowerThisThreadsPriority(nice = WORKER_THREAD_NICE) {
  let tid;
  try {
    // "<pid>/task/<tid>": on Linux, a thread's id names it alone to setpriority.
    tid = Number(readlinkSync('/proc/thread-self').split('/').pop());
  } catch {
    return;
  }
  if (!Number.isInteger(tid) || tid <= 0) return;
  try {
    if (getPriority(tid) < nice) setPriority(tid, nice);
  } catch {
    // Not permitted (a sandbox): the thread keeps its priority.
  }
}
