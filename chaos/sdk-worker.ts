/**
 * An SDK worker as its own process, for the chaos run's `--net-cut` (chaos/net-cut.ts): runs
 * tasks of one agent with a handler that waits (a short wait, sometimes a long one) until done or
 * aborted, and appends a start and a stop mark per run to its marks file:
 * `<s|e> <execution id> <run id> <epoch ms> <worker pid> [wait s | abort reason]`.
 *
 * Environment: BATON_URL, BATON_API_KEY, CHAOS_AGENT, CHAOS_CONCURRENCY, CHAOS_WORKER_ID,
 * CHAOS_MARKS, CHAOS_LONG_MS (the long wait), CHAOS_LONG_SHARE (how many runs wait long).
 */
import { appendFileSync } from 'node:fs';
import { createWorker, type TaskAborted } from '../src/worker/sdk.ts';

const env = (name: string) => {
  const v = process.env[name];
  if (v === undefined) throw new Error(`sdk-worker: ${name} is not set`);
  return v;
};
const marks = env('CHAOS_MARKS');
const longMs = Number(env('CHAOS_LONG_MS'));
const longShare = Number(env('CHAOS_LONG_SHARE'));
let runs = 0;
const mark = (what: 's' | 'e', id: string, run: string, extra = '') =>
  appendFileSync(marks, `${what} ${id} ${run} ${Date.now()} ${process.pid}${extra ? ` ${extra}` : ''}\n`);

const worker = createWorker({
  server: env('BATON_URL'),
  key: env('BATON_API_KEY'),
  agent: env('CHAOS_AGENT'),
  concurrency: Number(env('CHAOS_CONCURRENCY')),
  workerId: env('CHAOS_WORKER_ID'),
  // The harness stops everything with SIGTERM, then SIGKILL after 5 s.
  shutdownGraceMs: 2_000,
  abortWaitMs: 1_000,
  handler: (task) =>
    new Promise((resolve) => {
      const run = `${process.pid}.${++runs}`;
      const waitMs = Math.random() < longShare ? longMs : 50;
      mark('s', task.executionId, run, String(waitMs / 1000));
      const end = (reason: string) => {
        clearTimeout(timer);
        task.signal.removeEventListener('abort', onAbort);
        mark('e', task.executionId, run, reason);
        resolve({ ok: true });
      };
      const onAbort = () => end((task.signal.reason as TaskAborted).reason);
      const timer = setTimeout(() => end(''), waitMs);
      if (task.signal.aborted) onAbort();
      else task.signal.addEventListener('abort', onAbort, { once: true });
    }),
});

process.on('SIGTERM', () => void worker.stop().then(() => process.exit(0)));
worker.start().catch((err) => {
  process.stderr.write(`sdk-worker: ${(err as Error).message}\n`);
  process.exit(1);
});
