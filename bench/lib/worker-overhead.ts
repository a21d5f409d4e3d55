/**
 * What `baton worker` adds per task, beside what it cannot avoid: three ways of running the same
 * no-op tasks, interleaved round after round (spawn, worker, SDK, spawn, worker, SDK, …) so a
 * loaded machine weighs on each alike. Measures; never asserts.
 *
 * - spawn:  a bare `spawn('true')` per task from Node, as `baton worker` spawns its command
 *           (its own process group, three pipes), `concurrency` at a time; no server.
 * - worker: `baton worker --agent X --concurrency C -- true` against a `baton up` process.
 * - sdk:    the worker SDK with a no-op handler (bench/lib/users-worker.ts), same server, same tasks.
 *
 * For worker and sdk the tasks are queued on an agent held at max_parallel 0, then its cap is
 * raised to C and time runs until nothing is queued or running (bench/lib/drain.ts). Per task:
 * wall ms (wall / tasks) and the CPU ms of the process running the tasks (Node's side of the
 * spawn included; the `true` processes' own CPU is not), and of the server. What `baton worker`
 * adds beyond the spawn is worker − sdk − spawn.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { StoreKind } from '../../src/store/adapter.ts';
import { BatonClient } from '../../src/client.ts';
import { nodeHttpTransport } from '../../src/worker/http.ts';
import { proc } from './cpu.ts';
import { startServer, type RunningServer } from './server.ts';
import { round, sleep } from './stats.ts';
import { freshDb } from './stores.ts';
import type { WorkerProcessConfig } from './users-worker.ts';
import { startCliWorker } from './worker-bench.ts';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

export type OverheadWay = 'spawn' | 'worker' | 'sdk';
export const OVERHEAD_WAYS: readonly OverheadWay[] = ['spawn', 'worker', 'sdk'];

export interface OverheadConfig {
  tasks: number;
  concurrency: number;
  rounds: number;
  pgUrl: string;
  log: (msg: string) => void;
}

export interface OverheadRow {
  store: StoreKind;
  way: OverheadWay;
  round: number;
  tasks: number;
  concurrency: number;
  ms_per_task: number;
  /** CPU ms per task of the process that ran the tasks, and of `baton up` (null: no server). */
  cpu_ms_per_task: { runner: number | null; server: number | null };
  failed?: number;
  error?: string;
}

/** CPU ms per task between two tick readings (ticks are 10 ms). */
const perTask = (before: number | null, after: number | null, tasks: number) =>
  before === null || after === null ? null : round(((after - before) * 10) / tasks, 3);

/** A bare spawn per task, as src/worker/command.ts spawns (own group, three pipes), waiting for close. */
async function bareSpawns(cfg: OverheadConfig, store: StoreKind, r: number): Promise<OverheadRow> {
  let next = 0;
  const one = () =>
    new Promise<void>((resolve, reject) => {
      const child = spawn('true', [], { detached: true, stdio: ['pipe', 'pipe', 'pipe'] });
      child.once('error', reject);
      child.stdin.on('error', () => {}); // `true` reads nothing (EPIPE)
      child.stdin.end('noop');
      child.stdout.resume();
      child.stderr.resume();
      child.once('close', () => resolve());
    });
  const c0 = proc(process.pid);
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: cfg.concurrency }, async () => {
      while (next++ < cfg.tasks) await one();
    }),
  );
  const ms = performance.now() - t0;
  return {
    store,
    way: 'spawn',
    round: r,
    tasks: cfg.tasks,
    concurrency: cfg.concurrency,
    ms_per_task: round(ms / cfg.tasks, 3),
    cpu_ms_per_task: { runner: perTask(c0, proc(process.pid), cfg.tasks), server: null },
  };
}

/** The SDK with a no-op handler in its own process (bench/lib/users-worker.ts), serving one agent. */
function startSdkWorker(server: RunningServer, agent: string, cfg: OverheadConfig): Runner {
  const wp: WorkerProcessConfig = {
    system: 'sdk',
    workload: 'w1',
    tasks: cfg.tasks,
    agents: [agent],
    cap: cfg.concurrency,
    baton: { url: server.url, key: server.key },
  };
  const child = spawn(process.execPath, ['--import', 'tsx', 'bench/lib/users-worker.ts', JSON.stringify(wp)], {
    cwd: ROOT,
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stderr!.on('data', (d) => (err = (err + d).slice(-5000)));
  child.stdout!.on('data', (d) => (out += d));
  const ready = (async () => {
    for (let i = 0; !out.includes('"ready"'); i++) {
      if (child.exitCode !== null || i > 600) throw new Error(`the SDK worker did not start:\n${err}`);
      await sleep(50);
    }
  })();
  ready.catch(() => {});
  // users-worker.ts says {"done":N} once all N tasks were reported.
  return { child, ready, reported: () => (out.includes('"done"') ? cfg.tasks : 0) };
}

interface Runner {
  child: ChildProcess;
  ready: Promise<void>;
  /** Tasks the runner has reported so far. */
  reported(): number;
}

/**
 * Queue the tasks on the agent (held at max_parallel 0), raise its cap, and wait until the
 * runner says it reported them all: no polling, so the server serves only the tasks.
 */
async function drain(api: BatonClient, agent: string, runner: Runner, cfg: OverheadConfig, pids: number[]) {
  let next = 0;
  await Promise.all(
    Array.from({ length: 8 }, async () => {
      while (next++ < cfg.tasks) await api.submit(agent, { message: 'noop' });
    }),
  );
  const c0 = pids.map(proc);
  const t0 = performance.now();
  await api.updateAgent(agent, { max_parallel: cfg.concurrency });
  while (runner.reported() < cfg.tasks) {
    if (runner.child.exitCode !== null) throw new Error('the runner exited');
    await sleep(5);
  }
  const ms = performance.now() - t0;
  const c1 = pids.map(proc);
  const failed = (await api.listExecutions({ agent, status: 'failed,cancelled', limit: 200 })).executions.length;
  return { ms, cpu: pids.map((_, k) => perTask(c0[k]!, c1[k]!, cfg.tasks)), failed };
}

/** Queue the tasks, start the runner, raise the cap, time the drain. */
async function serverWay(server: RunningServer, way: 'worker' | 'sdk', cfg: OverheadConfig, store: StoreKind, r: number) {
  const api = new BatonClient({ server: server.url, key: server.key, transport: nodeHttpTransport });
  const agent = `wo-${way}-${r}-${Date.now().toString(36)}`;
  await api.createAgent({ name: agent, max_parallel: 0, max_backlog: cfg.tasks, lease_ttl_seconds: 30 });
  const runner: Runner = way === 'worker' ? startCliWorker(server, agent, cfg.concurrency, ['true']) : startSdkWorker(server, agent, cfg);
  try {
    await runner.ready;
    const d = await drain(api, agent, runner, cfg, [runner.child.pid!, server.pid]);
    return {
      store,
      way,
      round: r,
      tasks: cfg.tasks,
      concurrency: cfg.concurrency,
      ms_per_task: round(d.ms / cfg.tasks, 3),
      cpu_ms_per_task: { runner: d.cpu[0]!, server: d.cpu[1]! },
      failed: d.failed,
    } satisfies OverheadRow;
  } finally {
    if (way === 'worker') runner.child.kill('SIGTERM');
    else runner.child.stdin!.end();
    await new Promise((res) => (runner.child.exitCode !== null ? res(null) : runner.child.once('exit', res)));
    await api.deleteAgent(agent).catch(() => undefined);
  }
}

/** Every way, `rounds` times interleaved, on each store (one `baton up` per store). */
export async function runWorkerOverhead(stores: StoreKind[], cfg: OverheadConfig): Promise<OverheadRow[]> {
  const rows: OverheadRow[] = [];
  for (const store of stores) {
    const db = freshDb(store, cfg.pgUrl, 'overhead');
    const server = await startServer(db, 'spawn');
    try {
      for (let r = 1; r <= cfg.rounds; r++) {
        for (const way of OVERHEAD_WAYS) {
          cfg.log(`▶ worker overhead ${store} round ${r}: ${way} …`);
          let row: OverheadRow;
          try {
            row = way === 'spawn' ? await bareSpawns(cfg, store, r) : await serverWay(server, way, cfg, store, r);
          } catch (err: any) {
            row = {
              store,
              way,
              round: r,
              tasks: cfg.tasks,
              concurrency: cfg.concurrency,
              ms_per_task: NaN,
              cpu_ms_per_task: { runner: null, server: null },
              error: String(err?.message ?? err),
            };
          }
          const c = row.cpu_ms_per_task;
          cfg.log(`  ${row.error ?? `${row.ms_per_task} ms/task, CPU ms/task runner ${c.runner} server ${c.server ?? '–'}`}`);
          rows.push(row);
        }
      }
    } finally {
      await server.stop();
      await db.cleanup();
    }
  }
  return rows;
}

export const OVERHEAD_HEAD = [
  'store',
  'way',
  'rounds',
  'ms/task (each round)',
  'CPU ms/task runner (each round)',
  'CPU ms/task server (each round)',
];

const WAY_LABEL: Record<OverheadWay, string> = {
  spawn: 'bare spawn of `true` (no server)',
  worker: '`baton worker -- true`',
  sdk: 'worker SDK, no-op handler',
};

export function overheadTableRows(rows: OverheadRow[]): string[][] {
  const out: string[][] = [];
  const join = (xs: Array<number | null | undefined>) => xs.map((x) => (x === null || x === undefined ? '–' : String(x))).join(' · ');
  for (const store of [...new Set(rows.map((r) => r.store))]) {
    for (const way of OVERHEAD_WAYS) {
      const rs = rows.filter((r) => r.store === store && r.way === way);
      if (rs.length === 0) continue;
      out.push([
        store,
        WAY_LABEL[way],
        String(rs.length),
        rs.map((r) => (r.error ? 'ERROR' : String(r.ms_per_task))).join(' · '),
        join(rs.map((r) => r.cpu_ms_per_task.runner)),
        join(rs.map((r) => r.cpu_ms_per_task.server)),
      ]);
    }
  }
  return out;
}
