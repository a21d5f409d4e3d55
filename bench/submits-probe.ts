/**
 * Single submits over HTTP alone (no worker): a spawned `baton up`, 100 agents, 500 sequential and
 * 3,000 concurrent warm-up submits (the server's hot code is optimised by then: with 500 alone
 * the measured phase still paid for it), then N submits with 32 in flight (submits/s, server and
 * client CPU ms per submit) and 300 sequential submits on the now idle server (p50 ms). Measures;
 * never asserts.
 *
 * The server's CPU per submit counts what it does in the background too (timers, pollers),
 * which weighs more the slower the submits come on a busy machine: `server_idle_cpu_ms_per_s`
 * is measured over 4 s of an idle server before the phase, and `server_cpu_ms_per_submit_net`
 * subtracts it for the phase's duration.
 *
 * On a shared machine, BATON_TEST_PORTS=lo-hi puts the server on a port of that range and
 * BENCH_LABEL names the PostgreSQL schema (bench_<label>_…).
 *
 *   node --import tsx bench/submits-probe.ts sqlite|postgres [N=5000] [cpu-profile dir]
 */
import { nextPort, startServer } from './lib/server.ts';
import { freshDb } from './lib/stores.ts';
import { BatonClient } from '../src/client.ts';
import { closeConnections, nodeHttpTransport } from '../src/worker/http.ts';
import { proc } from './lib/cpu.ts';
const store = (process.argv[2] ?? 'sqlite') as 'sqlite' | 'postgres';
const N = Number(process.argv[3] ?? 5000);
const prof = process.argv[4];
const db = freshDb(store, 'postgres://postgres@127.0.0.1:5432/test', process.env.BENCH_LABEL ?? 'uprof');
const server = await startServer(db, 'spawn', { port: nextPort(), ...(prof ? { cpuProfDir: prof } : {}) });
const c = new BatonClient({ server: server.url, key: server.key, transport: nodeHttpTransport });
const agents = Array.from({ length: 100 }, (_, i) => `a${i}`);
for (const a of agents) await c.createAgent({ name: a, max_parallel: 3, max_backlog: 100000 });
for (let i = 0; i < 500; i++) await c.submit(agents[i % 100]!, { message: 'noop', payload: { i } });
const concurrently = async (n: number) => {
  let next = 0;
  await Promise.all(
    Array.from({ length: 32 }, async () => {
      while (next < n) {
        const i = next++;
        await c.submit(agents[i % 100]!, { message: 'noop', payload: { i } });
      }
    }),
  );
};
await concurrently(3000);
const i0 = proc(server.pid)!;
await new Promise((r) => setTimeout(r, 4000));
const idlePerS = (proc(server.pid)! - i0) / 4; // ticks a second
const s0 = proc(server.pid)!,
  b0 = proc(process.pid)!;
const t0 = performance.now();
await concurrently(N);
const sec = (performance.now() - t0) / 1000;
const s1 = proc(server.pid)!,
  b1 = proc(process.pid)!;
const lat: number[] = [];
for (let i = 0; i < 300; i++) {
  const t = performance.now();
  await c.submit(agents[i % 100]!, { message: 'noop', payload: { i } });
  lat.push(performance.now() - t);
}
lat.sort((a, b) => a - b);
console.log(
  JSON.stringify({
    store,
    submits_per_s: Math.round(N / sec),
    server_cpu_ms_per_submit: ((s1 - s0) * 10) / N,
    server_idle_cpu_ms_per_s: idlePerS * 10,
    server_cpu_ms_per_submit_net: ((s1 - s0 - idlePerS * sec) * 10) / N,
    client_cpu_ms_per_submit: ((b1 - b0) * 10) / N,
    seq_p50: lat[150]!.toFixed(2),
  }),
);
closeConnections();
await server.stop();
await db.cleanup();
