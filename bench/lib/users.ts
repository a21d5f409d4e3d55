/**
 * The users' shape: Baton as a deployment uses it, beside BullMQ and graphile-worker on the same
 * machine in the same run. Measures; never asserts (but a Baton W1 run whose read-back fails the
 * correctness check is reported as failed).
 *
 * W1-users: `tasks` no-op tasks round robin over `agents` agents capped at `cap`; ONE producer
 * (this process) doing single submits with `inFlight` in flight, as a webhook handler or a
 * script does; ONE worker process (bench/lib/users-worker.ts) serving all the agents. Time runs
 * from the first submit to the worker process saying it reported the last task. After every Baton
 * run the database is read back: every task succeeded exactly once, no admission over its cap.
 * BullMQ: one queue (it has no per-agent cap), one Worker with concurrency agents × cap.
 * graphile-worker: one task type, its runner tuned (concurrency, pool, LISTEN/NOTIFY wake).
 *
 * W2-users: an idle system; `agents` agents capped at 1, each with a waiting worker in the one
 * worker process; sequential submits round robin over the agents, `settleMs` apart. Latency:
 * process.hrtime.bigint() just before the submit call → the same clock read in the worker
 * process as the task's handler starts (CLOCK_MONOTONIC on Linux, shared by every process on the
 * machine; the worker sends its stamp on its stdout). `wake_pipe` is the older figure: until that
 * line arrives here, which adds the pipe and this process's wake-up (a hop no user has). The same
 * stamps for every system. BullMQ: a queue and a Worker per agent.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { BatonClient } from '../../src/client.ts';
import type { StoreKind } from '../../src/store/adapter.ts';
import { closeConnections, nodeHttpTransport } from '../../src/worker/http.ts';
import { proc } from './cpu.ts';
import { startServer } from './server.ts';
import { sleep, summarize, round, type LatencySummary } from './stats.ts';
import { freshDb, verify, type Verification } from './stores.ts';
import type { WorkerProcessConfig, WorkerSystem } from './users-worker.ts';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

export interface UsersConfig {
  tasks: number;
  agents: number;
  cap: number;
  inFlight: number;
  w2Submits: number;
  w2Warmup: number;
  settleMs: number;
  pgUrl: string;
  redis: { host: string; port: number; prefix: string };
  graphileConcurrency: number;
  /** The port for each Baton server (BATON_TEST_PORTS in bench/run.ts); default: one the OS picks. */
  port?: () => number;
  /** Which workloads run (default both). */
  workloads?: Array<'w1' | 'w2'>;
  log: (msg: string) => void;
}

export type UsersSystem = 'baton-sdk' | 'baton-sdk-per-agent' | 'baton-hand' | 'bullmq' | 'graphile';

export interface UsersRow {
  system: UsersSystem;
  /** Baton and graphile-worker: the store; BullMQ: redis. */
  store: StoreKind | 'redis';
  workload: 'w1' | 'w2';
  w1?: {
    tasks: number;
    seconds: number;
    tasks_per_s: number;
    submits_per_s: number;
    submit_call: LatencySummary;
    /** CPU ms per task of the producer, the server (Baton) and the worker process: comparable on a busy machine. */
    cpu_ms_per_task: { producer: number; server: number | null; worker: number };
    /** TCP connections the worker process opened to the server (Baton systems), from start to its last report. */
    worker_connections?: number;
    /** Baton: requests the server answered per task, by route and status (its /metrics), over the whole phase. */
    requests_per_task?: Record<string, number>;
  };
  w2?: {
    submits: number;
    agents: number;
    /** Submit call → the handler started, both stamped on the machine's monotonic clock. */
    wake: LatencySummary;
    /** Submit call → the worker's start line arrived in the bench process (adds the pipe hop). */
    wake_pipe: LatencySummary;
    submit_call: LatencySummary;
  };
  verification?: Verification;
  verified?: boolean;
  error?: string;
}

/** A submit function and the clean-up of what the system left. */
interface Target {
  /** The Baton server's process, if any. */
  serverPid?: number;
  /** Baton: requests answered so far by route and status (the server's /metrics). */
  requests?(): Promise<Record<string, number>>;
  submit(agent: string, i: number): Promise<string>;
  workerConfig: Partial<WorkerProcessConfig>;
  agentNames: string[];
  /** After the worker process stopped: read back (Baton), drop what was made. */
  finish(row: UsersRow): Promise<void>;
}

export async function runUsersPhase(
  system: UsersSystem,
  store: StoreKind | 'redis',
  workload: 'w1' | 'w2',
  cfg: UsersConfig,
): Promise<UsersRow> {
  const row: UsersRow = { system, store, workload };
  const cap = workload === 'w1' ? cfg.cap : 1;
  const names = Array.from({ length: cfg.agents }, (_, k) => `u${workload}-${String(k).padStart(3, '0')}`);
  let target: Target | undefined;
  let child: ChildProcess | undefined;
  try {
    target =
      system === 'bullmq'
        ? await bullmqTarget(cfg, names, workload)
        : system === 'graphile'
          ? await graphileTarget(cfg)
          : await batonTarget(cfg, store as StoreKind, names, cap, workload === 'w1' ? cfg.tasks : cfg.w2Submits + cfg.w2Warmup);
    const wp: WorkerProcessConfig = {
      system: WORKER_SYSTEM[system],
      workload,
      tasks: workload === 'w1' ? cfg.tasks : cfg.w2Submits + cfg.w2Warmup,
      agents: target.agentNames,
      cap,
      ...target.workerConfig,
    };
    const proc = startWorkerProcess(wp);
    child = proc.child;
    await proc.ready;
    if (workload === 'w1') row.w1 = await w1(cfg, target, proc);
    else row.w2 = await w2(cfg, target, proc);
    await proc.stop();
    child = undefined;
    await target.finish(row);
    target = undefined;
  } catch (err: any) {
    row.error = String(err?.message ?? err);
    cfg.log(`  failed: ${err?.stack ?? err}`);
  } finally {
    if (child && child.exitCode === null) child.kill('SIGKILL');
    await target?.finish(row).catch(() => {});
  }
  return row;
}

const WORKER_SYSTEM: Record<UsersSystem, WorkerSystem> = {
  'baton-sdk': 'sdk',
  'baton-sdk-per-agent': 'sdk-per-agent',
  'baton-hand': 'hand',
  bullmq: 'bullmq',
  graphile: 'graphile',
};

const cpuTicks = proc;

async function w1(cfg: UsersConfig, target: Target, proc: WorkerProcess): Promise<NonNullable<UsersRow['w1']>> {
  const calls: number[] = [];
  let next = 0;
  const pids = [process.pid, target.serverPid, proc.child.pid!];
  const requests0 = await target.requests?.();
  const ticks0 = pids.map((p) => (p === undefined ? null : cpuTicks(p)));
  const t0 = performance.now();
  const submitter = async () => {
    while (next < cfg.tasks) {
      const i = next++;
      const s = performance.now();
      await target.submit(target.agentNames[i % target.agentNames.length]!, i);
      calls.push(performance.now() - s);
    }
  };
  await Promise.all(Array.from({ length: cfg.inFlight }, submitter));
  const tSubmitted = performance.now();
  const { connections } = await proc.done;
  const seconds = (performance.now() - t0) / 1000;
  const perTask = pids.map((p, k) => {
    const before = ticks0[k];
    const after = p === undefined ? null : cpuTicks(p);
    return before === null || before === undefined || after === null ? null : round(((after - before) * 10) / cfg.tasks, 3);
  });
  // Read after the CPU ticks: rendering /metrics is not the phase's work.
  const requests = await target.requests?.();
  return {
    tasks: cfg.tasks,
    seconds: round(seconds, 3),
    tasks_per_s: round(cfg.tasks / seconds, 0),
    submits_per_s: round(cfg.tasks / ((tSubmitted - t0) / 1000), 0),
    submit_call: summarize(calls),
    cpu_ms_per_task: { producer: perTask[0]!, server: perTask[1] ?? null, worker: perTask[2]! },
    ...(connections !== undefined ? { worker_connections: connections } : {}),
    ...(requests ? { requests_per_task: perTaskCounts(requests, requests0 ?? {}, cfg.tasks) } : {}),
  };
}

/** Requests answered during the phase, per task. */
function perTaskCounts(after: Record<string, number>, before: Record<string, number>, tasks: number): Record<string, number> {
  return Object.fromEntries(Object.entries(after).map(([k, n]) => [k, round((n - (before[k] ?? 0)) / tasks, 3)]));
}

/** Requests answered by route and status, from Prometheus text (the HTTP histogram's counts). */
async function scrapeRequests(url: string): Promise<Record<string, number>> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const out: Record<string, number> = {};
  for (const m of text.matchAll(/^baton_http_request_duration_seconds_count\{([^}]*)\} (\d+)/gm)) {
    const labels = Object.fromEntries([...m[1]!.matchAll(/(\w+)="([^"]*)"/g)].map((l) => [l[1], l[2]]));
    if (labels.route === '/metrics') continue;
    out[`${labels.method} ${labels.route} ${labels.status_code}`] = Number(m[2]);
  }
  return out;
}

async function w2(cfg: UsersConfig, target: Target, proc: WorkerProcess): Promise<NonNullable<UsersRow['w2']>> {
  const wake: number[] = [];
  const wakePipe: number[] = [];
  const calls: number[] = [];
  for (let i = 0; i < cfg.w2Warmup + cfg.w2Submits; i++) {
    await sleep(cfg.settleMs);
    const t0 = performance.now();
    const stamp = process.hrtime.bigint();
    const id = await target.submit(target.agentNames[i % target.agentNames.length]!, i);
    const t1 = performance.now();
    const s = await proc.started(id);
    if (i >= cfg.w2Warmup) {
      wake.push(Number(s.stamp - stamp) / 1e6);
      wakePipe.push(s.arrived - t0);
      calls.push(t1 - t0);
    }
  }
  return {
    submits: cfg.w2Submits,
    agents: target.agentNames.length,
    wake: summarize(wake),
    wake_pipe: summarize(wakePipe),
    submit_call: summarize(calls),
  };
}

interface WorkerProcess {
  child: ChildProcess;
  ready: Promise<void>;
  done: Promise<{ connections?: number }>;
  /** When the task's handler started (the worker's hrtime stamp) and when its line arrived here (performance.now()). */
  started(id: string): Promise<Started>;
  stop(): Promise<void>;
}

interface Started {
  stamp: bigint;
  arrived: number;
}

function startWorkerProcess(wp: WorkerProcessConfig): WorkerProcess {
  // BENCH_USERS_WORKER_NODE_ARGS adds node flags to the worker process (e.g. "--cpu-prof --cpu-prof-dir D").
  const extra = process.env.BENCH_USERS_WORKER_NODE_ARGS?.split(' ').filter(Boolean) ?? [];
  const child = spawn(process.execPath, [...extra, '--import', 'tsx', 'bench/lib/users-worker.ts', JSON.stringify(wp)], {
    cwd: ROOT,
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr!.setEncoding('utf8').on('data', (c: string) => {
    stderr = (stderr + c).slice(-10_000);
    if (process.env.BENCH_WORKER_STDERR) process.stderr.write(c);
  });
  const starts = new Map<string, Started>();
  const waiters = new Map<string, (s: Started) => void>();
  let ready!: () => void;
  let done!: (d: { connections?: number }) => void;
  let failed!: (err: Error) => void;
  const failure = new Promise<never>((_, reject) => (failed = reject));
  failure.catch(() => {});
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  child.once('exit', (code, signal) => failed(new Error(`worker process exited (${code ?? signal}); stderr:\n${stderr}`)));
  let partial = '';
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
    const now = performance.now();
    const lines = (partial + chunk).split('\n');
    partial = lines.pop()!;
    for (const line of lines) {
      if (!line.startsWith('{')) continue; // a peer's own log line (graphile-worker logs to stdout)
      const m = JSON.parse(line) as { ready?: true; start?: string; at?: string; done?: number; connections?: number };
      if (m.ready) ready();
      else if (m.done !== undefined) done({ connections: m.connections });
      else if (m.start !== undefined) {
        const s: Started = { stamp: BigInt(m.at!), arrived: now };
        const w = waiters.get(m.start);
        if (w) w(s);
        else starts.set(m.start, s);
      }
    }
  });
  // Either may never be awaited (W2 waits for no `done`): a worker failure surfaces where one is.
  const readyP = Promise.race([new Promise<void>((r) => (ready = r)), failure]);
  const doneP = Promise.race([new Promise<{ connections?: number }>((r) => (done = r)), failure]);
  readyP.catch(() => {});
  doneP.catch(() => {});
  return {
    child,
    ready: readyP,
    done: doneP,
    started(id) {
      const at = starts.get(id);
      if (at !== undefined) return Promise.resolve(at);
      return Promise.race([new Promise<Started>((r) => waiters.set(id, r)), failure]);
    },
    async stop() {
      child.stdin!.end();
      const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

async function batonTarget(cfg: UsersConfig, store: StoreKind, names: string[], cap: number, backlog: number): Promise<Target> {
  const db = freshDb(store, cfg.pgUrl, 'users');
  // BENCH_USERS_CPU_PROF=<dir>: the server writes a .cpuprofile there (bench/profile-summary.ts reads it).
  const server = await startServer(db, 'spawn', { cpuProfDir: process.env.BENCH_USERS_CPU_PROF, port: cfg.port?.() });
  const client = new BatonClient({ server: server.url, key: server.key, transport: nodeHttpTransport });
  for (const name of names) await client.createAgent({ name, max_parallel: cap, max_backlog: backlog });
  return {
    serverPid: server.pid,
    requests: () => scrapeRequests(server.url),
    agentNames: names,
    workerConfig: { baton: { url: server.url, key: server.key } },
    async submit(agent, i) {
      return (await client.submit(agent, { message: 'noop', payload: { i } })).execution_id;
    },
    async finish(row) {
      closeConnections();
      await server.stop();
      try {
        if (row.workload === 'w1' && !row.error) {
          const s = await db.open({ poolMax: 2 });
          try {
            const v = await verify(s, 'uw1-');
            row.verification = v;
            row.verified =
              v.by_status.succeeded === cfg.tasks && v.executions === cfg.tasks && v.redelivered === 0 && v.over_admissions === 0;
          } finally {
            await s.close();
          }
        }
      } finally {
        await db.cleanup();
      }
    },
  };
}

async function bullmqTarget(cfg: UsersConfig, names: string[], workload: 'w1' | 'w2'): Promise<Target> {
  const { Queue } = await import('bullmq');
  const { host, port, prefix } = cfg.redis;
  const queueNames = workload === 'w1' ? [`${names[0]}-${Date.now().toString(36)}`] : names.map((n) => `${n}-${Date.now().toString(36)}`);
  const queues = new Map(queueNames.map((q) => [q, new Queue(q, { connection: { host, port }, prefix })]));
  const first = queues.values().next().value!;
  return {
    agentNames: queueNames,
    workerConfig: { redis: cfg.redis },
    async submit(q, i) {
      const job = await (workload === 'w1' ? first : queues.get(q)!).add('noop', { message: 'noop', payload: { i } });
      return job.id!;
    },
    async finish() {
      for (const q of queues.values()) {
        await q.obliterate({ force: true }).catch(() => {});
        await q.close();
      }
    },
  };
}

async function graphileTarget(cfg: UsersConfig): Promise<Target> {
  const { makeWorkerUtils } = await import('graphile-worker');
  const schema = `${cfg.redis.prefix.replace(/[^a-z0-9_]/gi, '_')}_gw_${Date.now().toString(36)}`;
  const utils = await makeWorkerUtils({ connectionString: cfg.pgUrl, schema });
  await utils.migrate();
  return {
    agentNames: ['noop'],
    workerConfig: { graphile: { connectionString: cfg.pgUrl, schema, concurrency: cfg.graphileConcurrency } },
    async submit(_q, i) {
      return (await utils.addJob('noop', { message: 'noop', payload: { i } })).id;
    },
    async finish() {
      await utils.release();
      const c = new pg.Client({ connectionString: cfg.pgUrl });
      await c.connect();
      try {
        await c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      } finally {
        await c.end();
      }
    },
  };
}

/** Every phase of the users' shape, W1 then W2, each system on each store it runs on. */
export async function runUsers(
  stores: StoreKind[],
  systems: UsersSystem[],
  cfg: UsersConfig,
  quiet: () => Promise<unknown>,
  interrupted: () => boolean,
): Promise<UsersRow[]> {
  const rows: UsersRow[] = [];
  for (const workload of cfg.workloads ?? (['w1', 'w2'] as const)) {
    for (const system of systems) {
      if (workload === 'w2' && system === 'graphile') continue; // its wake is a poll or NOTIFY away: measured in W1 only
      const on: Array<StoreKind | 'redis'> = system === 'bullmq' ? ['redis'] : system === 'graphile' ? ['postgres'] : stores;
      for (const store of on) {
        if (interrupted()) return rows;
        cfg.log(`▶ users ${workload.toUpperCase()} ${system} (${store}) …`);
        await quiet();
        const row = await runUsersPhase(system, store, workload, cfg);
        if (row.w1)
          cfg.log(
            `  ${row.w1.tasks_per_s} tasks/s, submits ${row.w1.submits_per_s}/s, submit p50 ${row.w1.submit_call.p50} ms${row.verified === false ? ' VERIFY FAILED' : ''}`,
          );
        if (row.w2) cfg.log(`  p50 ${row.w2.wake.p50} ms, p99 ${row.w2.wake.p99} ms, submit p50 ${row.w2.submit_call.p50} ms`);
        rows.push(row);
      }
    }
  }
  return rows;
}

export const USERS_HEAD = [
  'system',
  'store',
  'workload',
  'tasks/s',
  'submits/s',
  'submit p50 ms',
  'start p50 ms',
  'start p99 ms',
  'start p50 ms, via pipe',
  'CPU ms/task producer/server/worker',
  'requests/task (worker)',
  'check',
];

const SYSTEM_LABEL: Record<UsersSystem, string> = {
  'baton-sdk': 'Baton, worker SDK (one worker, all agents)',
  'baton-sdk-per-agent': 'Baton, worker SDK (a createWorker per agent)',
  'baton-hand': 'Baton, hand-written claim/complete loops',
  bullmq: 'BullMQ (no cap)',
  graphile: 'graphile-worker, tuned (no cap)',
};

export function usersTableRows(rows: UsersRow[]): string[][] {
  const f = (n: number | undefined, d = 0) =>
    n === undefined ? '' : n.toLocaleString('en-US', { minimumFractionDigits: d, maximumFractionDigits: d });
  return rows.map((r) => {
    const base = [SYSTEM_LABEL[r.system], r.store, r.workload === 'w1' ? 'W1-users' : 'W2-users'];
    if (r.error) return [...base, 'ERROR', '', '', '', '', '', '', '', r.error.split('\n')[0]!.slice(0, 80)];
    const check =
      r.verification === undefined
        ? ''
        : r.verified
          ? `every task once, max seats ${r.verification.max_seats_in_use}`
          : `FAILED ${JSON.stringify(r.verification)}`;
    if (r.w1) {
      const c = r.w1.cpu_ms_per_task;
      const cpu = `${f(c.producer, 2)} / ${c.server === null ? '–' : f(c.server, 2)} / ${f(c.worker, 2)}`;
      return [
        ...base,
        f(r.w1.tasks_per_s),
        f(r.w1.submits_per_s),
        f(r.w1.submit_call.p50, 2),
        '',
        '',
        '',
        cpu,
        workerRequests(r.w1),
        check,
      ];
    }
    const w = r.w2!;
    return [...base, '', '', f(w.submit_call.p50, 2), f(w.wake.p50, 2), f(w.wake.p99, 2), f(w.wake_pipe.p50, 2), '', '', check];
  });
}

/** The worker's requests per task: every answered request but the producer's submits. */
function workerRequests(w1: NonNullable<UsersRow['w1']>): string {
  if (!w1.requests_per_task) return '';
  let n = 0;
  for (const [k, v] of Object.entries(w1.requests_per_task)) if (!k.startsWith('POST /v1/agents/:agent/executions ')) n += v;
  return n.toFixed(2);
}
