/**
 * Parked claims, in-process: an Engine with N long-poll claims parked over 10 agents and nothing
 * to do. Reports, over a 10 s window, the admissions made (counted by wrapping the engine's one
 * admission function) and this process's CPU. No HTTP: what the waiting itself costs
 * (src/engine/waiters.ts). Measures; never asserts.
 *
 *   node --import tsx bench/parked-claims.ts <sqlite|postgres> [claims=1000]
 */
import { setMaxListeners } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Engine } from '../src/engine/engine.ts';
import type { StoreAdapter } from '../src/store/adapter.ts';
import { openPostgres } from '../src/store/postgres.ts';
import { openSqlite } from '../src/store/sqlite.ts';

const kind = process.argv[2] ?? 'sqlite';
const CLAIMS = Number(process.argv[3] ?? 1000);
const AGENTS = 10;
const WINDOW_MS = 10_000;
const PG_URL = process.env.BATON_BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const dir = mkdtempSync(join(tmpdir(), 'parked-claims-'));
const schema = `bench_parked_${Date.now().toString(36)}`;
const store: StoreAdapter = kind === 'sqlite' ? openSqlite(join(dir, 'baton.sqlite')) : openPostgres({ url: PG_URL, schema });
await store.migrate();
const engine = new Engine({ store, nodeId: 'parked-claims' });
let admissions = 0;
const inner = engine as unknown as { admitOnce: (...a: unknown[]) => Promise<unknown> };
const admitOnce = inner.admitOnce.bind(engine);
inner.admitOnce = (...a) => {
  admissions++;
  return admitOnce(...a);
};
for (let i = 0; i < AGENTS; i++) await engine.agents.create({ name: `pc${i}`, max_parallel: CLAIMS }, 'bench');
const stop = new AbortController();
// Every claim listens on this one signal.
setMaxListeners(CLAIMS + 10, stop.signal);
const claims = Array.from({ length: CLAIMS }, (_, i) =>
  engine.claim(`pc${i % AGENTS}`, { owner: `w${i}`, max: 1, waitMs: 120_000, signal: stop.signal }),
);
// Every claim has made its first look, and those looks have ended.
while (admissions < CLAIMS) await sleep(50);
await sleep(3000);
const a0 = admissions;
const c0 = process.cpuUsage();
const t0 = performance.now();
await sleep(WINDOW_MS);
const cpu = process.cpuUsage(c0);
const wall = performance.now() - t0;
console.log(
  JSON.stringify({
    store: kind,
    parked: CLAIMS,
    agents: AGENTS,
    admissions_per_s: Math.round(((admissions - a0) / wall) * 10_000) / 10,
    cpu_pct: Math.round(((cpu.user + cpu.system) / 1000 / wall) * 1000) / 10,
  }),
);
stop.abort();
await Promise.allSettled(claims);
engine.close();
if (kind === 'postgres') await store.db.schema.dropSchema(schema).ifExists().cascade().execute();
await store.close();
rmSync(dir, { recursive: true, force: true });
process.exit(0);
