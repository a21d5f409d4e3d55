/**
 * What canary E-04, S-05 and B-06 cost beside a deep backlog. Measures; never asserts.
 *
 *   node --import tsx bench/canary-backlog.ts --store sqlite --backlog 100000
 *
 * A fresh store (SQLite file under TMPDIR, or a PostgreSQL schema dropped at the end), ten agents,
 * one of them (`deep`, max_backlog 1,000,000) given `backlog` queued tasks through the engine. After
 * the canary has caught up with their events, for each of E-04, S-05 and B-06 (three rounds): its
 * population read alone in a snapshot, as a cycle reads it (E-04 a slice a cycle, SLICE_ROWS rows
 * where the code has slices), with its wall time, the rows it hands to JavaScript, the time the
 * main thread was busy (event-loop utilisation) and its longest busy stretch (a 2 ms timer's
 * longest gap, capped by the CPU the process used meanwhile); then three whole canary cycles.
 * Options: --store sqlite|postgres, --backlog N (default 100000), --rounds N (default 3), --pg-url URL.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import { performance } from 'node:perf_hooks';
import { sql } from 'kysely';
import pg from 'pg';
import { CATALOGUE } from '../src/canary/catalogue.ts';
import { DEFAULT_TIMING } from '../src/canary/graces.ts';
import * as run from '../src/canary/run.ts';
import type { StateInvariant } from '../src/canary/types.ts';
import { Engine } from '../src/engine/engine.ts';
import type { StoreAdapter } from '../src/store/adapter.ts';
import { openPostgres } from '../src/store/postgres.ts';
import { openSqlite } from '../src/store/sqlite.ts';

const { values: a } = parseArgs({
  options: {
    store: { type: 'string', default: 'sqlite' },
    backlog: { type: 'string', default: '100000' },
    rounds: { type: 'string', default: '3' },
    'pg-url': { type: 'string', default: process.env.BATON_BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test' },
  },
});
const kind = a.store === 'postgres' ? 'postgres' : 'sqlite';
const backlog = Number(a.backlog);
const log = (s: string) => process.stdout.write(s + '\n');

/** The longest stretch the main thread can have been busy: a 2 ms timer's longest gap, at most the CPU used in it. */
function stallProbe() {
  let last = performance.now();
  let lastCpu = process.cpuUsage();
  let worst = 0;
  const t = setInterval(() => {
    const now = performance.now();
    const cpu = process.cpuUsage(lastCpu);
    worst = Math.max(worst, Math.min(now - last, (cpu.user + cpu.system) / 1000));
    last = now;
    lastCpu = process.cpuUsage();
  }, 2);
  return () => {
    clearInterval(t);
    return Math.round(worst);
  };
}

async function measure<T>(fn: () => Promise<T>) {
  const stop = stallProbe();
  const elu = performance.eventLoopUtilization();
  const t0 = performance.now();
  const out = await fn();
  const ms = performance.now() - t0;
  const busy = performance.eventLoopUtilization(elu);
  return { out, ms: Math.round(ms), busyMs: Math.round(busy.active), worstMs: stop() };
}

async function main() {
  const keepAlive = setInterval(() => {}, 1_000);
  let store: StoreAdapter;
  let cleanup: () => Promise<void>;
  if (kind === 'sqlite') {
    const file = join(mkdtempSync(join(tmpdir(), 'baton-canary-backlog-')), 'baton.sqlite');
    store = openSqlite(file);
    cleanup = async () => rmSync(dirname(file), { recursive: true, force: true });
  } else {
    const schema = `canary_backlog_${process.pid}_${Date.now().toString(36)}`;
    store = openPostgres({ url: a['pg-url']!, schema });
    cleanup = async () => {
      const c = new pg.Client({ connectionString: a['pg-url'] });
      await c.connect();
      await c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await c.end();
    };
  }
  await store.migrate();
  const engine = new Engine({ store, nodeId: 'bench' });
  try {
    for (let i = 0; i < 10; i++) await engine.agents.create({ name: `ag-${i}`, max_parallel: 2, max_backlog: 1000 }, 'bench');
    await engine.agents.create({ name: 'deep', max_parallel: 1, max_backlog: 1_000_000 }, 'bench');
    for (let i = 0; i < backlog; i += 1000)
      await engine.submitMany(
        'deep',
        Array.from({ length: Math.min(1000, backlog - i) }, (_, j) => ({
          message: `deep ${i + j}`,
          payload: { n: i + j, text: 'x'.repeat(200) },
        })),
        'bench',
      );
    for (let i = 0; i < 10; i++) await engine.submit(`ag-${i}`, { message: 'live' }, 'bench');
    // PostgreSQL as autovacuum leaves it once the backlog is a tenth of the table (SQLite runs without statistics).
    if (kind === 'postgres') await sql`ANALYZE`.execute(store.db);
    for (let c = 0; c < 1000; c++) if ((await run.runCanaryOnce({ store })).events?.caught_up) break;
    log(`${kind}: ${backlog.toLocaleString('en-US')} queued on one agent; canary caught up`);
    const slice = (run as { SLICE_ROWS?: number }).SLICE_ROWS;
    let place: unknown;
    for (let r = 0; r < Number(a.rounds); r++) {
      for (const id of ['E-04', 'S-05', 'B-06']) {
        const inv = CATALOGUE.find((i) => i.id === id) as StateInvariant;
        const ctx = {
          now: store.now(),
          graceMs: 0,
          timing: DEFAULT_TIMING,
          kind,
          note: () => {},
          open: new Set<string>(),
          ...(slice ? { slices: { rows: slice, get: () => place, set: (p: unknown) => (place = p) } } : {}),
        };
        const m = await measure(() => store.snapshot((tx) => inv.population(tx, ctx as never)));
        log(
          `  ${id}: ${m.ms} ms, ${(m.out as unknown[]).length} rows to JavaScript, main thread busy ${m.busyMs} ms, longest stretch ${m.worstMs} ms`,
        );
      }
      const m = await measure(() => run.runCanaryOnce({ store }));
      log(`  cycle: ${m.ms} ms, main thread busy ${m.busyMs} ms, longest stretch ${m.worstMs} ms`);
    }
  } finally {
    engine.close();
    await store.close();
    await cleanup();
    clearInterval(keepAlive);
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
