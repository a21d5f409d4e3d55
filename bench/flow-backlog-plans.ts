/**
 * The plans of flow control's reads beside a deep backlog and a long history. Measures; never asserts.
 *
 *   node --import tsx bench/flow-backlog-plans.ts --store sqlite --n 1000000 --backlog 100000
 *   node --import tsx bench/flow-backlog-plans.ts --store postgres --n 1000000 --backlog 100000 --keep
 *
 * Fills a fresh store with `n` past executions (bench/lib/history-fill.ts: the history bench's
 * agents, hist-010 keyed, hist-011 and hist-012 in the pool hist-pool), unless `--reuse` names one
 * filled before (SQLite file / PostgreSQL schema), then gives the keyed agent a backlog of
 * `backlog` queued tasks on one key through the engine (one task of that key running, its
 * throttle closed, a debounced task waiting on another key). It runs the reads behind a key's and
 * a pool's seat holders (`waiting`), the key throttle's reopensAt, the claim that finds the key
 * shut, a debounced submit and canary invariant F-02, recording their statements, and prints each
 * one's plan with what it did: EXPLAIN (ANALYZE, BUFFERS) on PostgreSQL, EXPLAIN QUERY PLAN and
 * the time of 20 runs on SQLite. Twice: with the statistics of before the backlog (as a young store
 * plans: on PostgreSQL autovacuum is off for the run's tables) and after ANALYZE (SQLite: and
 * again without statistics, as deployed).
 * Options: --store sqlite|postgres, --n N (default 1000000), --backlog N (default 100000),
 * --reuse <file|schema> (its backlog is kept: --backlog 0), --schema NAME (a fresh PostgreSQL store's),
 * --keep, --pg-url URL.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import { performance } from 'node:perf_hooks';
import { CompiledQuery, isCompilable, sql, type Kysely, type KyselyPlugin } from 'kysely';
import pg from 'pg';
import { F02 } from '../src/canary/invariants/flow.ts';
import { Engine } from '../src/engine/engine.ts';
import { KeyGate, keyWaiting } from '../src/engine/flow-keys.ts';
import { poolView } from '../src/engine/pools.ts';
import type { StoreAdapter } from '../src/store/adapter.ts';
import { wrapStore } from './lib/wrap-store.ts';
import { openPostgres } from '../src/store/postgres.ts';
import type { DB } from '../src/store/schema.ts';
import { openSqlite } from '../src/store/sqlite.ts';
import { openSqliteReader } from '../src/store/sqlite-reader.ts';
import { fillHistory } from './lib/history-fill.ts';
import { createHistoryPool, HISTORY_KEYS, HISTORY_POOL, historyFlowSettings, KEYED_AGENT } from './lib/history-flow.ts';

const { values: a } = parseArgs({
  options: {
    store: { type: 'string', default: 'sqlite' },
    n: { type: 'string', default: '1000000' },
    backlog: { type: 'string', default: '100000' },
    reuse: { type: 'string' },
    schema: { type: 'string' },
    keep: { type: 'boolean', default: false },
    'pg-url': { type: 'string', default: process.env.BATON_BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test' },
  },
});

const kind = a.store === 'postgres' ? 'postgres' : 'sqlite';
const log = (s: string) => process.stdout.write(s + '\n');
const KEYED = `hist-${String(KEYED_AGENT).padStart(3, '0')}`;
const DEEP_KEY = 'k-deep';

// ── recording ───────────────────────────────────────────────────────────────

const recorded: { label: string; compiled: CompiledQuery }[] = [];
let label = '';

/** The store, with every statement sent through it recorded under the current label. */
function recording(inner: StoreAdapter): StoreAdapter {
  const wrap = <K extends Kysely<DB>>(k: K): K => {
    const plugin: KyselyPlugin = {
      transformQuery: ({ node, queryId }) => {
        if (label) recorded.push({ label, compiled: k.getExecutor().compileQuery(node, queryId) });
        return node;
      },
      transformResult: async ({ result }) => result,
    };
    const w = k.withPlugin(plugin) as K;
    const execute = w.executeQuery.bind(w);
    w.executeQuery = ((q: CompiledQuery | Parameters<typeof execute>[0]) => {
      if (label && !isCompilable(q)) recorded.push({ label, compiled: q as CompiledQuery });
      return execute(q as never);
    }) as typeof w.executeQuery;
    return w;
  };
  return wrapStore(inner, wrap);
}

async function during<T>(what: string, fn: () => Promise<T>): Promise<T> {
  label = what;
  try {
    return await fn();
  } finally {
    label = '';
  }
}

// ── store ───────────────────────────────────────────────────────────────────

async function open(): Promise<{ store: StoreAdapter; where: string; fresh: boolean }> {
  if (kind === 'sqlite') {
    const file = a.reuse ?? join(mkdtempSync(join(tmpdir(), 'baton-backlog-plans-')), 'baton.sqlite');
    const store = openSqlite(file);
    await store.migrate();
    return { store, where: file, fresh: !a.reuse };
  }
  const schema = a.reuse ?? a.schema ?? `backlog_plans_${process.pid}_${Date.now().toString(36)}`;
  const store = openPostgres({ url: a['pg-url']!, schema });
  await store.migrate();
  return { store, where: schema, fresh: !a.reuse };
}

async function seed(engine: Engine, where: string): Promise<void> {
  await createHistoryPool(engine);
  const agents = Array.from({ length: 100 }, (_, i) => ({
    name: `hist-${String(i).padStart(3, '0')}`,
    max_parallel: 3,
    ...(i === KEYED_AGENT ? { keys: HISTORY_KEYS } : {}),
  }));
  for (const [i, ag] of agents.entries())
    await engine.agents.create({ name: ag.name, max_parallel: ag.max_parallel, max_backlog: 1000, ...historyFlowSettings(i) }, 'bench');
  const n = Number(a.n);
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
  log(`filled: ${r.executions} executions in ${r.seconds} s, ANALYZE ${r.analyze_seconds} s`);
}

/** The backlog: `count` queued tasks of the keyed agent on one key, through the engine. */
async function backlog(store: StoreAdapter, engine: Engine, count: number): Promise<void> {
  if (store.kind === 'postgres')
    for (const t of ['executions', 'execution_events', 'audit_log'])
      await sql.raw(`ALTER TABLE ${t} SET (autovacuum_enabled = false)`).execute(store.db);
  await engine.agents.update(KEYED, { max_backlog: 1_000_000 }, 'bench');
  const t0 = performance.now();
  for (let i = 0; i < count; i += 1000) {
    const items = Array.from({ length: Math.min(1000, count - i) }, (_, j) => ({ message: `deep ${i + j}`, key: DEEP_KEY }));
    await engine.submitMany(KEYED, items, 'bench');
  }
  log(`backlog: ${count.toLocaleString('en-US')} queued on ${KEYED}/${DEEP_KEY} in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
}

// ── the reads ───────────────────────────────────────────────────────────────

async function runReads(store: StoreAdapter, now: number): Promise<void> {
  recorded.length = 0;
  const rec = recording(store);
  const engine = new Engine({ store: rec, nodeId: 'backlog-plans', clock: () => now });
  try {
    // One task of the deep key running (its cap is 1) and its throttle closed; a debounced task waiting.
    const running = await store.db
      .selectFrom('executions')
      .select('id')
      .where('agent', '=', KEYED)
      .where('status', '=', 'running')
      .executeTakeFirst();
    if (!running) await engine.claim(KEYED, { owner: 'bench', max: 1 });
    // The deep key's throttle closed for the next hour (as right after a start under a slow throttle).
    await store.db
      .updateTable('flow_keys')
      .set({ throttle_tat: now + 3_600_000 })
      .where('agent', '=', KEYED)
      .where('flow_key', '=', DEEP_KEY)
      .execute();
    await during('debounced submit', () => engine.submit(KEYED, { message: 'd', key: 'doc', debounce_seconds: 3600 }, 'bench'));
    await during('claim, key shut', () => engine.claim(KEYED, { owner: 'bench', max: 1 }));
    const agent = await store.db.selectFrom('agents').selectAll().where('name', '=', KEYED).executeTakeFirstOrThrow();
    await during('key seat holders', () => keyWaiting(rec.db, agent, DEEP_KEY, now));
    await during('pool seat holders', () => poolView(rec.db, HISTORY_POOL, now));
    const queued = await store.db
      .selectFrom('executions')
      .select('id')
      .where('agent', '=', KEYED)
      .where('status', '=', 'queued')
      .where('flow_key', '=', DEEP_KEY)
      .limit(1)
      .executeTakeFirstOrThrow();
    await during('waiting (agent seat holders, key)', () => engine.getExecution(queued.id));
    await during('key throttle reopensAt', () =>
      rec.transaction(async (tx) => {
        const gate = await KeyGate.open(tx, KEYED, agent, now);
        return gate?.reopensAt(store, tx, now);
      }),
    );
    const ctx = { now, graceMs: 0, timing: {} as never, kind: store.kind, note: () => {} };
    await during('canary F-02', () => rec.snapshot((tx) => F02.population(tx, ctx)));
  } finally {
    engine.close();
  }
}

async function explainAll(store: StoreAdapter, db: Kysely<DB>, heading: string): Promise<void> {
  log(`\n═══ ${heading} ═══`);
  const seen = new Set<string>();
  // The planner settings a statement ran with (src/engine/candidates.ts, inIndexOrder): replayed.
  let noSort = false;
  for (const { label: l, compiled } of recorded) {
    const text = compiled.sql;
    if (/set_config\('enable_sort', 'off', true\)/.test(text)) noSort = true;
    else if (/set_config\('enable_sort', \$1, true\)/.test(text)) noSort = false;
    if (!/^\s*(select|with)\b/i.test(text) || /^\s*(insert|update|delete)\b|\binsert into\b/i.test(text) || !/\bexecutions\b/.test(text))
      continue;
    const key = `${l}\u0000${text}`;
    if (seen.has(key)) continue;
    seen.add(key);
    log(`\n[${l}] ${text}\n  params ${JSON.stringify(compiled.parameters).slice(0, 200)}`);
    if (store.kind === 'sqlite') {
      const plan = await db.executeQuery<{ detail: string }>(CompiledQuery.raw(`EXPLAIN QUERY PLAN ${text}`, [...compiled.parameters]));
      const t0 = performance.now();
      let rows = 0;
      for (let i = 0; i < 20; i++) rows = (await db.executeQuery(CompiledQuery.raw(text, [...compiled.parameters]))).rows.length;
      log(`  ${plan.rows.map((r) => r.detail).join('\n  ')}\n  → ${rows} rows, ${((performance.now() - t0) / 20).toFixed(2)} ms a run`);
    } else {
      const sorts = !noSort;
      const out = await db.connection().execute(async (conn) => {
        await conn.executeQuery(CompiledQuery.raw('BEGIN'));
        try {
          if (!sorts) await conn.executeQuery(CompiledQuery.raw('SET LOCAL enable_sort = off; SET LOCAL enable_incremental_sort = off'));
          return await conn.executeQuery<{ 'QUERY PLAN': string }>(
            CompiledQuery.raw(`EXPLAIN (ANALYZE, BUFFERS) ${text}`, [...compiled.parameters]),
          );
        } finally {
          await conn.executeQuery(CompiledQuery.raw('ROLLBACK'));
        }
      });
      log(`  ${sorts ? '' : '(enable_sort = off)\n  '}${out.rows.map((r) => r['QUERY PLAN']).join('\n  ')}`);
    }
  }
}

async function main() {
  const keepAlive = setInterval(() => {}, 1_000);
  const { store, where, fresh } = await open();
  const engine = new Engine({ store, nodeId: 'bench' });
  const load = () => ` (load ${readFileSync('/proc/loadavg', 'utf8').trim()})`;
  try {
    if (fresh) await seed(engine, where);
    await backlog(store, engine, Number(a.backlog));
    const now = Date.now();
    await runReads(store, now);
    await explainAll(store, store.db, `with the statistics of before the backlog${load()}`);
    if (store.kind === 'sqlite') await sql`ANALYZE`.execute(store.db);
    else for (const t of ['executions', 'flow_keys', 'agents']) await sql.raw(`ANALYZE ${t}`).execute(store.db);
    await explainAll(store, store.db, `after ANALYZE${load()}`);
    if (store.kind === 'sqlite') {
      await sql`DROP TABLE sqlite_stat1`.execute(store.db);
      await sql`DROP TABLE IF EXISTS sqlite_stat4`.execute(store.db);
      const fresh = openSqliteReader(where);
      try {
        await explainAll(store, fresh, `without statistics, as deployed${load()}`);
      } finally {
        await fresh.destroy();
      }
    }
  } finally {
    engine.close();
    await store.close();
    clearInterval(keepAlive);
    if (fresh && !a.keep) {
      if (kind === 'sqlite') rmSync(dirname(where), { recursive: true, force: true });
      else {
        const c = new pg.Client({ connectionString: a['pg-url'] });
        await c.connect();
        await c.query(`DROP SCHEMA IF EXISTS ${where} CASCADE`);
        await c.end();
      }
    } else log(`kept: ${where}`);
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
