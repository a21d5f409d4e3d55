/**
 * A/B of single submits over HTTP on a shared machine: two `baton up` at once, one from each
 * checkout, sent bursts of submits (32 in flight) in turn, A B B A …, so both see the same load;
 * each server's CPU per submit (all its threads, /proc/<pid>/task/<tid>/schedstat, ns), gross and
 * net of what it uses idle (measured over 6 s before), its rate, and 200 sequential submits' p50.
 * Run it both ways round (A and B swapped): a single run moved ±5 % with the same code on both
 * sides at load average 9. Ports from BATON_TEST_PORTS (lo-hi) when set, the schemas named by BENCH_LABEL.
 *
 *   node --import tsx bench/ab-submits.ts sqlite|postgres <checkout A> <checkout B> [bursts=10] [per burst=2000]
 */
import { spawn } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { nextPort } from './lib/server.ts';
import { freshDb, type BenchDb } from './lib/stores.ts';
import { BatonClient } from '../src/client.ts';
import { closeConnections, nodeHttpTransport } from '../src/worker/http.ts';
const [store, dirA, dirB] = process.argv.slice(2) as ['sqlite' | 'postgres', string, string];
const BURSTS = Number(process.argv[5] ?? 10);
const PER = Number(process.argv[6] ?? 2000);
/** CPU ns of every thread of `pid`, or of all but its main thread (`others`: the store's worker threads). */
const cpuNs = (pid: number, others = false) => {
  let s = 0;
  for (const t of readdirSync(`/proc/${pid}/task`)) {
    if (others && t === String(pid)) continue;
    try {
      s += Number(readFileSync(`/proc/${pid}/task/${t}/schedstat`, 'utf8').split(' ')[0]);
    } catch {}
  }
  return s;
};
async function up(dir: string, db: BenchDb) {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const k of Object.keys(env)) if (k.startsWith('BATON_')) delete env[k];
  Object.assign(env, db.env, { BATON_PORT: String(nextPort()), BATON_HOST: '127.0.0.1', BATON_LOG_LEVEL: 'info' });
  const child = spawn(process.execPath, ['bin/baton.js', 'up'], { cwd: dir, env, stdio: ['ignore', 'pipe', 'ignore'] });
  const url = await new Promise<string>((res, rej) => {
    let part = '';
    child.stdout!.setEncoding('utf8').on('data', (c: string) => {
      const ls = (part + c).split('\n');
      part = ls.pop()!;
      for (const l of ls) {
        try {
          const j = JSON.parse(l);
          if (j.msg === 'baton is up') res(j.url);
        } catch {}
      }
    });
    child.once('exit', () => rej(new Error('exited')));
  });
  const key = readFileSync(join(db.dataDir, 'admin.key'), 'utf8').trim();
  const c = new BatonClient({ server: url, key, transport: nodeHttpTransport });
  return { child, c, pid: child.pid! };
}
const dbA = freshDb(store, 'postgres://postgres@127.0.0.1:5432/test', `${process.env.BENCH_LABEL ?? 'ab'}_a`);
const dbB = freshDb(store, 'postgres://postgres@127.0.0.1:5432/test', `${process.env.BENCH_LABEL ?? 'ab'}_b`);
const A = await up(dirA, dbA),
  B = await up(dirB, dbB);
const agents = Array.from({ length: 100 }, (_, i) => `a${i}`);
for (const s of [A, B]) for (const a of agents) await s.c.createAgent({ name: a, max_parallel: 3, max_backlog: 1000000 });
const burst = async (c: BatonClient, n: number) => {
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
for (const s of [A, B]) await burst(s.c, 4000); // warm-up
const idle0 = [cpuNs(A.pid), cpuNs(B.pid)];
await new Promise((r) => setTimeout(r, 6000));
const idle = [(cpuNs(A.pid) - idle0[0]!) / 6, (cpuNs(B.pid) - idle0[1]!) / 6]; // ns per s
const tot = { A: { ns: 0, g: 0, s: 0, n: 0, th: 0 }, B: { ns: 0, g: 0, s: 0, n: 0, th: 0 } };
const per: string[] = [];
for (let b = 0; b < BURSTS; b++) {
  for (const [name, s] of (b % 2
    ? [
        ['B', B],
        ['A', A],
      ]
    : [
        ['A', A],
        ['B', B],
      ]) as Array<['A' | 'B', typeof A]>) {
    const c0 = cpuNs(s.pid),
      th0 = cpuNs(s.pid, true),
      t0 = performance.now();
    await burst(s.c, PER);
    const sec = (performance.now() - t0) / 1000,
      ns = cpuNs(s.pid) - c0;
    const idleNs = (name === 'A' ? idle[0]! : idle[1]!) * sec;
    tot[name].ns += ns - idleNs;
    tot[name].th += cpuNs(s.pid, true) - th0;
    tot[name].g += ns;
    tot[name].s += sec;
    tot[name].n += PER;
    per.push(`${name}:${((ns - idleNs) / PER / 1e6).toFixed(3)}`);
  }
}
const r = (x: { ns: number; g: number; s: number; n: number; th: number }) => ({
  net_ms_per_submit: +(x.ns / x.n / 1e6).toFixed(4),
  // Of the gross, the threads other than the main one (SQLite: the WAL checkpoints, the reader).
  threads_ms_per_submit: +(x.th / x.n / 1e6).toFixed(4),
  gross_ms_per_submit: +(x.g / x.n / 1e6).toFixed(4),
  per_s: Math.round(x.n / x.s),
});
const seq = async (c: BatonClient) => {
  const lat: number[] = [];
  for (let i = 0; i < 200; i++) {
    const t = performance.now();
    await c.submit(agents[i % 100]!, { message: 'noop', payload: { i } });
    lat.push(performance.now() - t);
  }
  lat.sort((x, y) => x - y);
  return +lat[100]!.toFixed(3);
};
const seqA = await seq(A.c),
  seqB = await seq(B.c);
console.log(
  JSON.stringify({
    store,
    load: readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' '),
    A: { ...r(tot.A), seq_p50: seqA, idle_ms_per_s: +(idle[0]! / 1e6).toFixed(1) },
    B: { ...r(tot.B), seq_p50: seqB, idle_ms_per_s: +(idle[1]! / 1e6).toFixed(1) },
    ratio_B_over_A: +(tot.B.ns / tot.B.n / (tot.A.ns / tot.A.n)).toFixed(3),
    gross_ratio: +(tot.B.g / tot.B.n / (tot.A.g / tot.A.n)).toFixed(3),
  }),
);
console.error(per.join(' '));
closeConnections();
for (const s of [A, B]) {
  s.child.kill('SIGTERM');
  await new Promise((r) => s.child.once('exit', r));
}
await dbA.cleanup();
await dbB.cleanup();
