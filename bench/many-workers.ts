/**
 * Many workers: a spawned `baton up` with 1,000 long-polling claim loops (raw HTTP, one keep-alive
 * socket each, all in this process), 100 loops on each of 10 agents. It reports the server's RSS
 * (from /proc) idle with no claim parked and with all 1,000 parked, the server's CPU while the
 * 1,000 wait and nothing is submitted (and, for comparison, with none parked), and claim latency (submit sent → task
 * received by a loop) p50/p99 while tasks are submitted at a steady rate. Measures; never asserts.
 *
 *   node --import tsx bench/many-workers.ts <sqlite|postgres> [loops=1000] [rate/s=50] [seconds=20] [port=0]
 *
 * The server allows 256 open connections per client address by default; this run raises it
 * (BATON_MAX_CONNECTIONS_PER_ADDRESS), since every loop here comes from 127.0.0.1.
 */
import http from 'node:http';
import { readFileSync } from 'node:fs';
import { BatonClient } from '../src/client.ts';
import { closeConnections, nodeHttpTransport } from '../src/worker/http.ts';
import { pgBackendTicks, proc } from './lib/cpu.ts';
import { startServer } from './lib/server.ts';
import { freshDb } from './lib/stores.ts';

const store = (process.argv[2] ?? 'sqlite') as 'sqlite' | 'postgres';
const LOOPS = Number(process.argv[3] ?? 1000);
const RATE = Number(process.argv[4] ?? 50);
const SECONDS = Number(process.argv[5] ?? 20);
const PORT = Number(process.argv[6] ?? 0);
const AGENTS = 10;
/** The longest long-poll the API allows: loops started together re-poll together, after the idle window. */
const WAIT_S = 60;
const IDLE_WINDOW_MS = 15_000;
const PG_URL = process.env.BATON_BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const rssMiB = (pid: number) => {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Math.round(Number(m[1]) / 102.4) / 10 : null;
};
/** CPU ms the server's PostgreSQL backends used between two pgBackendTicks snapshots (null on SQLite). */
const pgMs = (a: Map<number, number> | null, b: Map<number, number> | null) => {
  if (!a || !b) return null;
  let ticks = 0;
  for (const [pid, t] of b) if (a.has(pid)) ticks += t - a.get(pid)!;
  return ticks * 10;
};
const pgSnap = () => (store === 'postgres' ? pgBackendTicks(PG_URL, [server.pid]) : Promise.resolve(null));
const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? null : Math.round(s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]! * 10) / 10;
};

const db = freshDb(store, PG_URL, 'many-workers');
const server = await startServer(db, 'spawn', { port: PORT, env: { BATON_MAX_CONNECTIONS_PER_ADDRESS: String(LOOPS * 2) } });
const url = new URL(server.url);
const client = new BatonClient({ server: server.url, key: server.key, transport: nodeHttpTransport });
const agents = Array.from({ length: AGENTS }, (_, i) => `mw${i}`);
for (const a of agents) await client.createAgent({ name: a, max_parallel: LOOPS, max_backlog: 100_000 });

// One socket per loop: a parked claim holds its connection.
const agent = new http.Agent({ keepAlive: true, maxSockets: LOOPS + 16 });
function post(path: string, body: unknown): Promise<{ status: number; json: unknown }> {
  const data = JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: url.hostname,
        port: url.port,
        path,
        method: 'POST',
        agent,
        headers: { authorization: `Bearer ${server.key}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8').on('data', (c: string) => (text += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, json: text ? JSON.parse(text) : null }));
      },
    );
    req.on('error', reject);
    req.end(data);
  });
}

/** Submit send time by task number (the payload's `k`). */
const sentAt = new Map<number, number>();
const latencies: number[] = [];
let parked = 0;
let stopping = false;
let errors = 0;
type Task = { execution_id: string; lease_token: string; payload: { k?: number } };

async function loop(i: number) {
  const name = agents[i % AGENTS]!;
  while (!stopping) {
    parked++;
    let r: { status: number; json: unknown };
    try {
      r = await post(`/v1/agents/${name}/claim`, { worker_id: `w${i}`, wait_seconds: WAIT_S });
    } catch {
      errors++;
      await sleep(500);
      continue;
    } finally {
      parked--;
    }
    if (r.status === 204) continue;
    if (r.status !== 200) {
      errors++;
      await sleep(500);
      continue;
    }
    const now = performance.now();
    for (const t of (r.json as { tasks: Task[] }).tasks) {
      const sent = t.payload.k === undefined ? undefined : sentAt.get(t.payload.k);
      if (sent !== undefined) latencies.push(now - sent);
      await post(`/v1/executions/${t.execution_id}/complete`, { lease_token: t.lease_token, status: 'succeeded' });
    }
  }
}

await sleep(3000);
const rssNone = rssMiB(server.pid);
// The same idle window with no claim parked: what the server's own passes (reaper, scheduler, …) cost.
const bp0 = await pgSnap();
const b0 = proc(server.pid)!;
const bw0 = performance.now();
await sleep(IDLE_WINDOW_MS);
const baseCpuMs = (proc(server.pid)! - b0) * 10;
const basePgMs = pgMs(bp0, await pgSnap());
const baseWallMs = performance.now() - bw0;
const loops = Array.from({ length: LOOPS }, (_, i) => loop(i));
for (let t0 = Date.now(); parked < LOOPS && Date.now() - t0 < 30_000;) await sleep(100);
// A loaded server is still parking the claims for a while after they were sent: BENCH_SETTLE_MS waits longer.
await sleep(Number(process.env.BENCH_SETTLE_MS ?? 2000));
const parkedAtIdle = parked;
const rssParked = rssMiB(server.pid);
const p0 = await pgSnap();
const c0 = proc(server.pid)!;
const w0 = performance.now();
await sleep(IDLE_WINDOW_MS);
const idleCpuMs = (proc(server.pid)! - c0) * 10;
const idlePgMs = pgMs(p0, await pgSnap());
const idleWallMs = performance.now() - w0;
const rssParkedAfter = rssMiB(server.pid);

// Steady submits: one every 1/RATE s, round robin over the agents, none awaited before the next;
// latency is from sending the submit to a loop receiving the task.
const total = RATE * SECONDS;
const submits: Promise<void>[] = [];
const s0 = performance.now();
for (let k = 0; k < total; k++) {
  const due = s0 + (k * 1000) / RATE;
  const wait = due - performance.now();
  if (wait > 0) await sleep(wait);
  sentAt.set(k, performance.now());
  submits.push(client.submit(agents[k % AGENTS]!, { message: 'noop', payload: { k } }).then(() => undefined));
}
await Promise.all(submits);
for (let t0 = Date.now(); latencies.length < total && Date.now() - t0 < 30_000;) await sleep(100);

console.log(
  JSON.stringify({
    store,
    loops: LOOPS,
    agents: AGENTS,
    parked_at_idle: parkedAtIdle,
    rss_mib_no_claims: rssNone,
    rss_mib_parked: rssParked,
    rss_mib_parked_after_idle: rssParkedAfter,
    idle_server_cpu_ms_no_claims: baseCpuMs,
    idle_server_cpu_pct_no_claims: Math.round((baseCpuMs / baseWallMs) * 1000) / 10,
    idle_postgres_cpu_ms_no_claims: basePgMs,
    idle_server_cpu_ms: idleCpuMs,
    idle_postgres_cpu_ms: idlePgMs,
    idle_window_ms: Math.round(idleWallMs),
    idle_server_cpu_pct: Math.round((idleCpuMs / idleWallMs) * 1000) / 10,
    submitted: total,
    rate_per_s: RATE,
    claimed_measured: latencies.length,
    claim_latency_ms_p50: pct(latencies, 50),
    claim_latency_ms_p99: pct(latencies, 99),
    claim_latency_ms_max: pct(latencies, 100),
    errors,
  }),
);

stopping = true;
agent.destroy();
await Promise.allSettled(loops);
closeConnections();
await server.stop();
await db.cleanup();
process.exit(0);
