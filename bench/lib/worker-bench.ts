/**
 * W1 through `baton worker`: a real `baton worker --agent X --concurrency C -- true` process runs
 * every task, so each task pays for claim, process spawn (in its own group, registered with the
 * guardian), completion and the HTTP round trips. Measures; never asserts.
 *
 * Method: the agent starts with max_parallel 0, the worker starts and connects, every task is
 * submitted, then max_parallel is raised to C (the raise wakes the worker's long-poll). Time runs
 * from the raise until no task is queued or running.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { BatonClient } from '../../src/client.ts';
import { timeDrain } from './drain.ts';

const BATON_BIN = fileURLToPath(new URL('../../bin/baton.js', import.meta.url));

export interface WorkerBenchConfig {
  tasks?: number; // default 500
  concurrency?: number; // worker --concurrency and the agent's max_parallel (default 8)
  command?: string[]; // default ['true']
}

export interface WorkerBenchResult {
  scenario: 'w1_worker_cli';
  tasks: number;
  concurrency: number;
  seconds: number;
  tasks_per_s: number;
  failed: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * A `baton worker --agent <agent> --concurrency C -- <command>` process; `ready` resolves once it
 * says it is serving. BENCH_WORKER_NODE_ARGS adds node flags (e.g. "--cpu-prof --cpu-prof-dir D").
 */
export function startCliWorker(
  server: { url: string; key: string },
  agent: string,
  concurrency: number,
  command: string[],
): { child: ChildProcess; ready: Promise<void>; reported: () => number } {
  const extra = process.env.BENCH_WORKER_NODE_ARGS?.split(' ').filter(Boolean) ?? [];
  const child = spawn(
    process.execPath,
    [...extra, BATON_BIN, 'worker', '--agent', agent, '--concurrency', String(concurrency), '--shutdown-grace', '5', '--', ...command],
    {
      env: { ...process.env, BATON_URL: server.url, BATON_API_KEY: server.key },
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  let err = '';
  let partial = '';
  let reported = 0;
  child.stderr!.setEncoding('utf8').on('data', (d: string) => {
    err = (err + d).slice(-20_000);
    const lines = (partial + d).split('\n');
    partial = lines.pop()!;
    for (const l of lines) if (/ (succeeded|failed|cancelled)$/.test(l)) reported++;
  });
  const ready = (async () => {
    for (let i = 0; !err.includes('serving agent'); i++) {
      if (child.exitCode !== null || i > 600) throw new Error(`baton worker did not start:\n${err}`);
      await sleep(50);
    }
  })();
  ready.catch(() => {});
  return { child, ready, reported: () => reported };
}

export async function runWorkerBench(server: { url: string; key: string }, cfg: WorkerBenchConfig = {}): Promise<WorkerBenchResult> {
  const tasks = cfg.tasks ?? 500;
  const concurrency = cfg.concurrency ?? 8;
  const api = new BatonClient({ server: server.url, key: server.key });
  const agent = `wb-${Date.now().toString(36)}`;
  await api.createAgent({ name: agent, max_parallel: 0, max_backlog: tasks, lease_ttl_seconds: 30 });
  const { child, ready } = startCliWorker(server, agent, concurrency, cfg.command ?? ['true']);
  try {
    await ready;
    return { scenario: 'w1_worker_cli', tasks, concurrency, ...(await timeDrain(api, agent, tasks, concurrency)) };
  } finally {
    child.kill('SIGTERM');
    await new Promise((r) => (child.exitCode !== null ? r(null) : child.once('exit', r)));
    await api.deleteAgent(agent).catch(() => undefined);
  }
}
