/**
 * The wake path of W2-users without HTTP or other processes: an engine in this process, 100 agents
 * capped at 1, each with a claim loop parked in `engine.claim` (long-poll), then sequential submits
 * round robin over the agents, 5 ms apart (after 20 of warm-up). Start: from just before
 * `engine.submit` to the claim loop holding the task; submit: until `engine.submit` returned.
 * What is left is the engine and the store: the commit, the wake, the admission. Measures; never
 * asserts. Run it in two worktrees in turn (A B A B) to compare them on a busy machine.
 *
 *   node --import tsx bench/wake-probe.ts sqlite|postgres [N=300]
 */
import { Engine } from '../src/engine/engine.ts';
import { freshDb } from './lib/stores.ts';
import { sleep } from './lib/stats.ts';

const kind = (process.argv[2] ?? 'sqlite') as 'sqlite' | 'postgres';
const n = Number(process.argv[3] ?? 300);
const db = freshDb(kind, process.env.BATON_BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test', 'wakeprobe');
const store = await db.open({});
const engine = new Engine({ store, nodeId: 'wake-probe' });
const agents = Array.from({ length: 100 }, (_, i) => `wp${i}`);
for (const a of agents) await engine.agents.create({ name: a, max_parallel: 1, max_backlog: 10_000 }, 'probe');

// A task's start, by id, whichever of the claim and the submit's answer comes first.
const heldAt = new Map<string, number>();
const waiting = new Map<string, (at: number) => void>();
let stopping = false;
const loops = agents.map(async (agent) => {
  while (!stopping) {
    const rows = await engine.claim(agent, { owner: 'probe', max: 1, waitMs: 30_000 });
    const at = performance.now();
    for (const r of rows) {
      const w = waiting.get(r.id);
      if (w) w(at);
      else heldAt.set(r.id, at);
      await engine.complete(r.id, r.lease_token!, { status: 'succeeded' }, 'probe');
    }
  }
});
await sleep(300);

const starts: number[] = [];
const submits: number[] = [];
for (let i = 0; i < n + 20; i++) {
  await sleep(5);
  const t0 = performance.now();
  const row = await engine.submit(agents[i % agents.length]!, { message: 'noop' }, 'probe');
  const t1 = performance.now();
  const at = heldAt.get(row.id) ?? (await new Promise<number>((r) => waiting.set(row.id, r)));
  if (i >= 20) {
    starts.push(at - t0);
    submits.push(t1 - t0);
  }
}
const q = (v: number[], p: number) => Number([...v].sort((a, b) => a - b)[Math.floor(p * (v.length - 1))]!.toFixed(3));
console.log(
  JSON.stringify({
    store: kind,
    submits: n,
    start_p50: q(starts, 0.5),
    start_p90: q(starts, 0.9),
    submit_p50: q(submits, 0.5),
    submit_p90: q(submits, 0.9),
  }),
);
stopping = true;
engine.close();
await Promise.all(loops);
await store.close();
await db.cleanup();
