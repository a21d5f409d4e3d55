/**
 * A/B of whole tasks in one process (no HTTP), SQLite: an Engine from each checkout, sent bursts
 * of tasks in turn (A B B A …) so both see the same machine load. A task is a submit, a claim
 * made with an API key (waitMs 0) and a successful completion, 32 in flight; each burst uses 100
 * fresh agents (breaker on by default), 20 tasks each, so the breaker's window is filling, as in
 * W1-users. Reports this process's CPU per task for each side (process.cpuUsage, worker threads
 * included). Run it both ways round.
 *
 *   node --import tsx bench/ab-tasks.ts <checkout A> <checkout B> [bursts=10] [tasks per burst=2000]
 */
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
const [dirA, dirB] = process.argv.slice(2) as [string, string];
const BURSTS = Number(process.argv[4] ?? 10),
  PER = Number(process.argv[5] ?? 2000);
async function make(dir: string) {
  const { Engine } = await import(join(dir, 'src/engine/engine.ts'));
  const { openSqlite } = await import(join(dir, 'src/store/sqlite.ts'));
  const { KeyStore } = await import(join(dir, 'src/auth/keys.ts'));
  const store = openSqlite(join(mkdtempSync(join(tmpdir(), 'cab-')), 'b.sqlite'));
  await store.migrate();
  const engine = new Engine({ store, nodeId: 'cab' });
  const { row } = await new KeyStore(store).create({ name: 'w', scope: 'admin' }, 'b');
  return { engine, keyId: row.id as string };
}
const E = { A: await make(dirA), B: await make(dirB) };
let round = 0;
const burst = async ({ engine, keyId }: any, n: number) => {
  const tag = `r${round++}`;
  for (let i = 0; i < 100; i++) await engine.agents.create({ name: `${tag}-${i}`, max_parallel: 3, max_backlog: 1000000 }, 'b');
  const c0 = process.cpuUsage();
  let next = 0;
  await Promise.all(
    Array.from({ length: 32 }, async (_, w) => {
      while (next < n) {
        const i = next++;
        const agent = `${tag}-${i % 100}`;
        await engine.submit(
          agent,
          { message: 'noop', payloadJson: `{"i":${i}}`, trigger: 'api', origin: { key_id: keyId }, idempotency_key: null },
          `key:${keyId}`,
        );
        const [t] = await engine.claim(agent, { owner: `w${w}`, max: 1, waitMs: 0, keyId });
        if (t) await engine.complete(t.id, t.lease_token, { status: 'succeeded', result: '{"ok":true}', error: null }, `key:${keyId}`);
      }
    }),
  );
  const c = process.cpuUsage(c0);
  return c.user + c.system;
};
await burst(E.A, 3000);
await burst(E.B, 3000);
const tot = { A: 0, B: 0 };
for (let b = 0; b < BURSTS; b++) for (const k of (b % 2 ? ['B', 'A'] : ['A', 'B']) as Array<'A' | 'B'>) tot[k] += await burst(E[k], PER);
const n = BURSTS * PER;
console.log(
  JSON.stringify({
    A_us_per_task: +(tot.A / n).toFixed(1),
    B_us_per_task: +(tot.B / n).toFixed(1),
    ratio: +(tot.B / tot.A).toFixed(3),
    load: readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' '),
  }),
);
process.exit(0);
