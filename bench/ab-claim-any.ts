/**
 * A/B of W1-users' engine work in one process (no HTTP), SQLite: an Engine from each checkout,
 * sent bursts in turn (A B B A …) so both see the same machine load. A burst is 100 fresh agents
 * capped at 3 and `per` tasks round robin over them, submitted 32 at a time, served as the worker
 * SDK serves them: one waiting claim on every agent with a free slot (engine.claimAny), widened
 * with an agent whose slot frees while it waits, each task completed as soon as it arrives and the
 * claim sent again as soon as it answers. Reports this process's CPU per task for each side
 * (process.cpuUsage, worker threads included), and each side's admissions a task (a spy on the
 * engine's admitOnce). Run it both ways round.
 *
 *   node --import tsx bench/ab-claim-any.ts <checkout A> <checkout B> [bursts=10] [tasks per burst=2000]
 */
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const [dirA, dirB] = process.argv.slice(2) as [string, string];
const BURSTS = Number(process.argv[4] ?? 10);
const PER = Number(process.argv[5] ?? 2000);
const AGENTS = 100;
const CAP = 3;

interface Side {
  engine: any;
  admissions: number;
}

async function make(dir: string): Promise<Side> {
  const { Engine } = await import(join(dir, 'src/engine/engine.ts'));
  const { openSqlite } = await import(join(dir, 'src/store/sqlite.ts'));
  const store = openSqlite(join(mkdtempSync(join(tmpdir(), 'cany-')), 'b.sqlite'));
  await store.migrate();
  const side: Side = { engine: new Engine({ store, nodeId: 'cany' }), admissions: 0 };
  const admitOnce = side.engine.admitOnce.bind(side.engine);
  side.engine.admitOnce = (...a: unknown[]) => {
    side.admissions++;
    return admitOnce(...a);
  };
  return side;
}

let round = 0;

/** One burst on `side`: its CPU in µs and its admissions. */
async function burst(side: Side, n: number): Promise<{ cpu: number; admissions: number }> {
  const { engine } = side;
  const tag = `r${round++}`;
  const agents = Array.from({ length: AGENTS }, (_, i) => `${tag}-${i}`);
  for (const name of agents) await engine.agents.create({ name, max_parallel: CAP, max_backlog: 1_000_000, breaker: null }, 'b');
  const a0 = side.admissions;
  const c0 = process.cpuUsage();
  const running = new Map(agents.map((a) => [a, 0]));
  let done = 0;
  let finished!: () => void;
  const allDone = new Promise<void>((r) => (finished = r));
  let out: { asked: Set<string>; widening: { add?: (i: { agent: string; max: number }[]) => boolean } } | undefined;
  const free = (a: string) => CAP - running.get(a)!;
  const complete = async (t: any) => {
    await engine.complete(t.id, t.lease_token, { status: 'succeeded', result: '{"ok":true}', error: null }, 'w');
    running.set(t.agent, running.get(t.agent)! - 1);
    if (++done === n) finished();
    else if (out && !out.asked.has(t.agent) && out.widening.add?.([{ agent: t.agent, max: free(t.agent) }])) out.asked.add(t.agent);
  };
  const end = new AbortController();
  const worker = (async () => {
    while (!end.signal.aborted) {
      const items = agents.filter((a) => free(a) > 0).map((agent) => ({ agent, max: free(agent) }));
      if (items.length === 0) {
        await new Promise((r) => setImmediate(r));
        continue;
      }
      const widening = {};
      out = { asked: new Set(items.map((i) => i.agent)), widening };
      const rows = await engine.claimAny(items, { owner: 'w', waitMs: 20_000, end: end.signal, widening });
      out = undefined;
      for (const t of rows) {
        running.set(t.agent, running.get(t.agent)! + 1);
        void complete(t);
      }
    }
  })();
  let next = 0;
  await Promise.all(
    Array.from({ length: 32 }, async () => {
      while (next < n) {
        const i = next++;
        await engine.submit(agents[i % AGENTS], { message: 'noop', payloadJson: `{"i":${i}}`, trigger: 'api', idempotency_key: null }, 'b');
      }
    }),
  );
  await allDone;
  end.abort();
  await worker;
  const c = process.cpuUsage(c0);
  return { cpu: c.user + c.system, admissions: side.admissions - a0 };
}

const E = { A: await make(dirA), B: await make(dirB) };
await burst(E.A, 2000);
await burst(E.B, 2000);
const tot = { A: { cpu: 0, admissions: 0 }, B: { cpu: 0, admissions: 0 } };
for (let b = 0; b < BURSTS; b++)
  for (const k of (b % 2 ? ['B', 'A'] : ['A', 'B']) as Array<'A' | 'B'>) {
    const r = await burst(E[k], PER);
    tot[k].cpu += r.cpu;
    tot[k].admissions += r.admissions;
  }
const n = BURSTS * PER;
console.log(
  JSON.stringify({
    A_us_per_task: +(tot.A.cpu / n).toFixed(1),
    B_us_per_task: +(tot.B.cpu / n).toFixed(1),
    ratio: +(tot.B.cpu / tot.A.cpu).toFixed(3),
    A_admissions_per_task: +(tot.A.admissions / n).toFixed(2),
    B_admissions_per_task: +(tot.B.admissions / n).toFixed(2),
    load: readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' '),
  }),
);
process.exit(0);
