/**
 * A/B of W2-users' start on a shared machine: two checkouts served at once, each a `baton up` and
 * a worker process (bench/lib/users-worker.ts, from the checkout) serving 100 agents capped at 1,
 * and sequential submits, 10 ms apart, in bursts to one side then the other, A B B A …, so both
 * see the same load. Start: from `process.hrtime.bigint()` just before the submit call here to the
 * same clock as the task's handler starts in the worker process (as W2-users measures it,
 * bench/lib/users.ts). Prints each side's start and submit-call p50 and p90, and B's p50 over A's.
 * Ports from BATON_TEST_PORTS (lo-hi) when set; schemas named by BENCH_LABEL; node flags for the
 * servers from BENCH_SERVER_NODE_ARGS and for the worker processes from BENCH_USERS_WORKER_NODE_ARGS
 * (e.g. "--cpu-prof --cpu-prof-dir DIR"; bench/profile-summary.ts reads the profiles).
 *
 *   node --import tsx bench/w2-probe.ts sqlite|postgres <checkout A> <checkout B> [bursts=8] [per burst=60] [sdk|hand]
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { nextPort } from './lib/server.ts';
import { freshDb, type BenchDb } from './lib/stores.ts';
import { sleep } from './lib/stats.ts';
import { BatonClient } from '../src/client.ts';
import { closeConnections, nodeHttpTransport } from '../src/worker/http.ts';

const [store, dirA, dirB] = process.argv.slice(2) as ['sqlite' | 'postgres', string, string];
const BURSTS = Number(process.argv[5] ?? 8);
const PER = Number(process.argv[6] ?? 60);
const SYSTEM = (process.argv[7] ?? 'sdk') as 'sdk' | 'hand';
const WARMUP = 20;
const PAUSE_MS = 10;
const agents = Array.from({ length: 100 }, (_, i) => `w${i}`);

/** JSON lines of a child's stdout, each handed to `on`. */
function lines(child: ChildProcess, on: (j: Record<string, unknown>) => void): void {
  let part = '';
  child.stdout!.setEncoding('utf8').on('data', (c: string) => {
    const ls = (part + c).split('\n');
    part = ls.pop()!;
    for (const l of ls) {
      try {
        on(JSON.parse(l));
      } catch {}
    }
  });
}

interface Side {
  name: 'A' | 'B';
  server: ChildProcess;
  worker: ChildProcess;
  client: BatonClient;
  db: BenchDb;
  /** The worker's hrtime stamp as the task's handler started. */
  started(id: string): Promise<bigint>;
  start: number[];
  call: number[];
  url: string;
}

/** Requests the server answered so far, by `route status` (its HTTP histogram's counts). */
async function requests(url: string): Promise<Map<string, number>> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const out = new Map<string, number>();
  for (const l of text.split('\n')) {
    const m = /^baton_http_request_duration_seconds_count\{(.*)\} (\d+)/.exec(l);
    if (!m) continue;
    const label = (k: string) => new RegExp(`${k}="([^"]*)"`).exec(m[1]!)?.[1];
    out.set(`${label('method')} ${label('route')} ${label('status_code')}`, Number(m[2]));
  }
  return out;
}

async function side(name: 'A' | 'B', dir: string): Promise<Side> {
  const db = freshDb(store, 'postgres://postgres@127.0.0.1:5432/test', `${process.env.BENCH_LABEL ?? 'w2'}_${name.toLowerCase()}`);
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const k of Object.keys(env)) if (k.startsWith('BATON_')) delete env[k];
  Object.assign(env, db.env, { BATON_PORT: String(nextPort()), BATON_HOST: '127.0.0.1', BATON_LOG_LEVEL: 'info' });
  const serverArgs = process.env.BENCH_SERVER_NODE_ARGS?.split(' ').filter(Boolean) ?? [];
  const server = spawn(process.execPath, [...serverArgs, 'bin/baton.js', 'up'], { cwd: dir, env, stdio: ['ignore', 'pipe', 'ignore'] });
  const url = await new Promise<string>((res, rej) => {
    lines(server, (j) => j.msg === 'baton is up' && res(j.url as string));
    server.once('exit', () => rej(new Error(`baton up in ${dir} exited`)));
  });
  const key = readFileSync(join(db.dataDir, 'admin.key'), 'utf8').trim();
  const client = new BatonClient({ server: url, key, transport: nodeHttpTransport });
  for (const a of agents) await client.createAgent({ name: a, max_parallel: 1, max_backlog: 100_000 });
  const config = { system: SYSTEM, workload: 'w2', tasks: 1e9, agents, cap: 1, baton: { url, key } };
  const workerArgs = process.env.BENCH_USERS_WORKER_NODE_ARGS?.split(' ').filter(Boolean) ?? [];
  const worker = spawn(process.execPath, [...workerArgs, '--import', 'tsx', 'bench/lib/users-worker.ts', JSON.stringify(config)], {
    cwd: dir,
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const stamps = new Map<string, bigint>();
  const waiting = new Map<string, (at: bigint) => void>();
  let ready!: () => void;
  const isReady = new Promise<void>((r) => (ready = r));
  lines(worker, (m) => {
    if (m.ready) ready();
    else if (typeof m.start === 'string') {
      const at = BigInt(m.at as string);
      const w = waiting.get(m.start);
      if (w) w(at);
      else stamps.set(m.start, at);
    }
  });
  await isReady;
  const started = (id: string) => {
    const at = stamps.get(id);
    if (at !== undefined) return Promise.resolve(at);
    return new Promise<bigint>((r) => waiting.set(id, r));
  };
  return { name, server, worker, client, db, started, start: [], call: [], url };
}

let sent = 0;
async function burst(s: Side, n: number, keep: boolean): Promise<void> {
  for (let i = 0; i < n; i++) {
    await sleep(PAUSE_MS);
    const agent = agents[sent++ % agents.length]!;
    const t0 = performance.now();
    const stamp = process.hrtime.bigint();
    const { execution_id } = await s.client.submit(agent, { message: 'noop', payload: { i } });
    const t1 = performance.now();
    const at = await s.started(execution_id);
    if (keep) {
      s.start.push(Number(at - stamp) / 1e6);
      s.call.push(t1 - t0);
    }
  }
}

const sides: Side[] = [];
/** Stops what was started and drops its databases, also after a failure (no schema is left behind). */
async function stopAll(): Promise<void> {
  closeConnections();
  for (const s of sides) {
    const gone = (c: ChildProcess) =>
      c.exitCode !== null || c.signalCode !== null ? Promise.resolve() : new Promise((r) => c.once('exit', r));
    s.worker.stdin!.end();
    s.worker.kill('SIGTERM');
    await gone(s.worker);
    s.server.kill('SIGTERM');
    await gone(s.server);
    await s.db.cleanup();
  }
}
try {
  sides.push(await side('A', dirA));
  sides.push(await side('B', dirB));
  const [A, B] = sides as [Side, Side];
  for (const s of [A, B]) await burst(s, WARMUP, false);
  const load0 = readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
  const before = await Promise.all([requests(A.url), requests(B.url)]);
  for (let b = 0; b < BURSTS; b++) for (const s of b % 2 ? [B, A] : [A, B]) await burst(s, PER, true);
  await sleep(500); // the last task's completion and the claims after it
  const after = await Promise.all([requests(A.url), requests(B.url)]);
  const perSubmit = (i: 0 | 1, n: number) =>
    Object.fromEntries(
      [...after[i]]
        .map(([k, v]) => [k, +((v - (before[i].get(k) ?? 0)) / n).toFixed(3)] as const)
        .filter(([k, v]) => v > 0 && !k.startsWith('GET /metrics')),
    );
  const q = (v: number[], p: number) => +[...v].sort((x, y) => x - y)[Math.floor(p * (v.length - 1))]!.toFixed(3);
  const view = (s: Side) => ({
    start_p50: q(s.start, 0.5),
    start_p90: q(s.start, 0.9),
    call_p50: q(s.call, 0.5),
    call_p90: q(s.call, 0.9),
    requests_a_submit: perSubmit(s === A ? 0 : 1, s.start.length),
  });
  console.log(
    JSON.stringify({
      store,
      system: SYSTEM,
      submits_each: A.start.length,
      load: `${load0} → ${readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ')}`,
      A: view(A),
      B: view(B),
      start_p50_B_over_A: +(q(B.start, 0.5) / q(A.start, 0.5)).toFixed(3),
    }),
  );
} finally {
  await stopAll();
}
