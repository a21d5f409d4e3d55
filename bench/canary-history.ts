/**
 * What a canary cycle costs on a database with a long history. Measures; never asserts.
 *
 *   node --import tsx bench/canary-history.ts --store sqlite --n 1000000
 *   node --import tsx bench/canary-history.ts --store postgres --n 1000000 --keep
 *
 * Fills a fresh store with `n` past executions (3 events each; bench/lib/history-fill.ts),
 * unless `--reuse` names one filled before (SQLite file / PostgreSQL schema), then times:
 *   1. the first cycle (no checkpoint: it catches up at most one per-cycle cap of events),
 *   2. steady cycles after a little new activity (the normal case: cost follows activity),
 *   3. for each cycle: how long the main thread was busy, the event-loop delay, and the CPU
 *      spent in the longest stretch between timer turns (against an idle baseline: on a shared
 *      machine the delay alone is mostly scheduling noise),
 *   4. optionally (`--full`) one full check over all history.
 * Options: --store sqlite|postgres, --n N (default 200000), --reuse <file|schema>, --schema NAME
 * (a fresh PostgreSQL store's), --keep,
 * --full, --catch-up (run cycles until the checkpoint reaches the head), --pg-url URL.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';
import pg from 'pg';
import { CATALOGUE, isActivity } from '../src/canary/catalogue.ts';
import { runCanaryOnce, type CycleReport } from '../src/canary/run.ts';
import { Engine } from '../src/engine/engine.ts';
import type { StoreAdapter } from '../src/store/adapter.ts';
import { openPostgres } from '../src/store/postgres.ts';
import { openSqlite } from '../src/store/sqlite.ts';
import { fillHistory } from './lib/history-fill.ts';
import { createHistoryPool, HISTORY_KEYS, historyFlowSettings, historyKeyOf, KEYED_AGENT } from './lib/history-flow.ts';

const { values: a } = parseArgs({
  options: {
    store: { type: 'string', default: 'sqlite' },
    n: { type: 'string', default: '200000' },
    reuse: { type: 'string' },
    schema: { type: 'string' },
    keep: { type: 'boolean', default: false },
    full: { type: 'boolean', default: false },
    'catch-up': { type: 'boolean', default: false },
    'pg-url': { type: 'string', default: process.env.BATON_BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test' },
  },
});

const kind = a.store === 'postgres' ? 'postgres' : 'sqlite';
const n = Number(a.n);
const log = (s: string) => process.stdout.write(s + '\n');

async function open(): Promise<{ store: StoreAdapter; where: string; fresh: boolean }> {
  if (kind === 'sqlite') {
    const file = a.reuse ?? join(mkdtempSync(join(tmpdir(), 'baton-canary-bench-')), 'baton.sqlite');
    const store = openSqlite(file);
    await store.migrate();
    return { store, where: file, fresh: !a.reuse };
  }
  const schema = a.reuse ?? a.schema ?? `canary_bench_${Date.now().toString(36)}`;
  const store = openPostgres({ url: a['pg-url']!, schema });
  await store.migrate();
  return { store, where: schema, fresh: !a.reuse };
}

function summary(r: CycleReport): string {
  const ev = r.events;
  return `${r.duration_ms} ms, events ${ev ? `${ev.read} read (after ${ev.after} → ${ev.through}${ev.caught_up ? ', caught up' : ', behind'})` : '-'}, open ${r.open}`;
}

/**
 * On a shared machine a delayed timer may mean the process was not scheduled, not that it was
 * busy. A 2 ms timer notes each gap between its turns and the CPU the process used meanwhile
 * (on PostgreSQL all canary JavaScript runs on this thread; on SQLite the reader thread's CPU is
 * counted too, so the figure is an upper bound): a gap with little CPU is scheduling noise.
 */
function stallProbe() {
  let last = performance.now();
  let lastCpu = process.cpuUsage();
  let worst = { wall: 0, cpu: 0 };
  const t = setInterval(() => {
    const now = performance.now();
    const cpu = process.cpuUsage(lastCpu);
    // The gap that held the most CPU: the longest the thread can have been busy in one stretch.
    const used = Math.min(now - last, (cpu.user + cpu.system) / 1000);
    if (used > worst.cpu) worst = { wall: Math.round(now - last), cpu: Math.round(used) };
    last = now;
    lastCpu = process.cpuUsage();
  }, 2);
  return {
    stop() {
      clearInterval(t);
      return worst;
    },
  };
}

async function main() {
  // The SQLite reader thread is unref'd: keep this one-shot process alive while it waits on it.
  const keepAlive = setInterval(() => {}, 1_000);
  const { store, where, fresh } = await open();
  const engine = new Engine({ store, nodeId: 'bench' });
  const agents = Array.from({ length: 100 }, (_, i) => ({
    name: `hist-${String(i).padStart(3, '0')}`,
    max_parallel: 3,
    ...(i === KEYED_AGENT ? { keys: HISTORY_KEYS } : {}),
  }));
  if (fresh) {
    await createHistoryPool(engine);
    for (const [i, ag] of agents.entries())
      await engine.agents.create({ name: ag.name, max_parallel: ag.max_parallel, max_backlog: 1000, ...historyFlowSettings(i) }, 'bench');
    log(`filling ${n.toLocaleString('en-US')} executions into ${kind} ${where} …`);
    const r = await fillHistory(kind === 'sqlite' ? { kind, file: where } : { kind, url: a['pg-url'], schema: where }, {
      n,
      agents,
      days: 35,
      now: Date.now(),
      batch: 10_000,
      seed: 1,
      log,
    });
    log(`filled: ${r.executions} executions, ${r.events} events in ${r.seconds} s`);
  }
  const h = monitorEventLoopDelay({ resolution: 5 });
  const delay = () => `event-loop delay max ${(h.max / 1e6).toFixed(1)} ms, p99 ${(h.percentile(99) / 1e6).toFixed(1)} ms`;
  // The noise floor: what the probe reports on this machine while the process does nothing.
  h.enable();
  await new Promise((r) => setTimeout(r, 5_000));
  h.disable();
  log(`${'idle process, 5 s'.padEnd(28)} ${delay()}`);
  const cycle = async (label: string, full = false) => {
    h.reset();
    h.enable();
    const elu = performance.eventLoopUtilization();
    const stalls = stallProbe();
    const r = await runCanaryOnce({ store, full });
    const longest = stalls.stop();
    const busy = performance.eventLoopUtilization(elu);
    h.disable();
    log(
      `${label.padEnd(28)} ${summary(r)}; main thread busy ${Math.round(busy.active)} ms; ${delay()}; busiest stretch ${longest.cpu} ms CPU (in a ${longest.wall} ms gap)`,
    );
    return r;
  };

  // As on a database that predates checkpoints: the first cycle starts at event 0 and stops at its cap.
  await store.db.deleteFrom('canary_checkpoints').execute();
  await cycle('first cycle (no checkpoint)');
  if (a['catch-up']) {
    for (let i = 0; i < 10_000; i++) {
      const r = await cycle(`catch-up ${i + 1}`);
      if (r.events?.caught_up) break;
    }
  } else {
    // Skip history the way an upgraded database would after catching up: checkpoints at the head,
    // one for every invariant that reads the event log (a cycle reads from the lowest of them, so
    // one left out would make every cycle read the log from its first event).
    const head = await store.db
      .selectFrom('execution_events')
      .select((eb) => eb.fn.max<number>('id').as('m'))
      .executeTakeFirstOrThrow();
    await store.db.deleteFrom('canary_checkpoints').execute();
    const t = Date.now();
    for (const inv of CATALOGUE.filter(isActivity)) {
      await store.db
        .insertInto('canary_checkpoints')
        .values({ invariant: inv.id, event_id: Number(head.m), state: null, updated_at: t })
        .execute();
    }
    log(`checkpoints set at the head (event ${head.m})`);
  }
  for (let i = 0; i < 3; i++) {
    // A little new activity: 300 executions submitted, 100 of them run to completion.
    // (The keyed agent's tasks carry keys; the pooled agents' draw on the pool.)
    for (let k = 0; k < 300; k++)
      await engine.submit(agents[k % agents.length]!.name, { message: 'bench', ...historyKeyOf(k % agents.length, k) }, 'bench');
    for (let k = 0; k < 100; k++) {
      const [row] = await engine.claim(agents[k % agents.length]!.name, { owner: 'bench' });
      if (row) await engine.complete(row.id, row.lease_token!, { status: 'succeeded' }, 'bench');
    }
    await cycle(`steady cycle ${i + 1}`);
    await cycle(`idle cycle ${i + 1}`);
  }
  if (a.full) await cycle('full check', true);
  engine.close();
  await store.close();
  if (!a.keep && fresh) {
    if (kind === 'sqlite') rmSync(dirname(where), { recursive: true, force: true });
    if (kind === 'postgres') {
      const c = new pg.Client({ connectionString: a['pg-url'] });
      await c.connect();
      await c.query(`DROP SCHEMA ${where} CASCADE`);
      await c.end();
    }
  } else log(`kept: --reuse ${where}`);
  clearInterval(keepAlive);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
