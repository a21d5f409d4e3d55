/**
 * What each read of a steady canary cycle reads, counted by the database, not timed. Measures; never asserts.
 *
 *   node --import tsx bench/canary-reads.ts --store sqlite [--reuse FILE]
 *   node --import tsx bench/canary-reads.ts --store postgres [--reuse SCHEMA]
 *
 * Opens a store (a fresh empty one with the history bench's agents, or `--reuse` one filled
 * before by bench/canary-history.ts or bench/flow-backlog-plans.ts), sets the canary's
 * checkpoints at the event log's head, makes a little new activity (as the history bench's steady
 * cycles do), runs one canary cycle through a store that records every statement, then replays
 * each distinct statement of that cycle that reads a history table and prints what it read:
 *   PostgreSQL: EXPLAIN (ANALYZE, BUFFERS), rolled back, under the planner settings the statement
 *     ran with: shared buffers hit + read (pages) and rows the scans of executions, events and
 *     logs touched (returned + filtered out), with the plan's scans;
 *   SQLite: the sqlite3 shell's `.stats` on a fresh connection per statement: page cache misses
 *     (pages read into the cache), hits, and virtual machine steps, with EXPLAIN QUERY PLAN.
 * With `--cpu N` (PostgreSQL, the server on this machine) each such read also runs N more times,
 * each in its own transaction, rolled back, under the same settings, and the CPU the serving backend
 * spent on it is read from /proc: the first run's and the median of the others (microseconds).
 * Options: --store sqlite|postgres, --reuse <file|schema>, --schema NAME (a fresh PostgreSQL
 * store's), --keep, --activity N (tasks submitted before the cycle; default 300), --cpu N, --pg-url URL.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import { CompiledQuery, isCompilable, type Kysely, type KyselyPlugin } from 'kysely';
import pg from 'pg';
import { CATALOGUE, isActivity } from '../src/canary/catalogue.ts';
import { runCanaryOnce } from '../src/canary/run.ts';
import { Engine } from '../src/engine/engine.ts';
import type { StoreAdapter } from '../src/store/adapter.ts';
import { wrapStore } from './lib/wrap-store.ts';
import { openPostgres } from '../src/store/postgres.ts';
import type { DB } from '../src/store/schema.ts';
import { openSqlite } from '../src/store/sqlite.ts';
import { createHistoryPool, HISTORY_KEYS, historyFlowSettings, historyKeyOf, KEYED_AGENT } from './lib/history-flow.ts';

const { values: a } = parseArgs({
  options: {
    store: { type: 'string', default: 'sqlite' },
    reuse: { type: 'string' },
    schema: { type: 'string' },
    keep: { type: 'boolean', default: false },
    activity: { type: 'string', default: '300' },
    cpu: { type: 'string', default: '0' },
    'pg-url': { type: 'string', default: process.env.BATON_BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test' },
  },
});
const kind = a.store === 'postgres' ? 'postgres' : 'sqlite';
const log = (s: string) => process.stdout.write(s + '\n');
const HISTORY = /"(executions|execution_events|execution_logs|audit_log|agent_budget_ledger|pool_budget_ledger)"/;

// ── recording ───────────────────────────────────────────────────────────────

const recorded: CompiledQuery[] = [];
let on = false;

function recording(inner: StoreAdapter): StoreAdapter {
  const wrap = <K extends Kysely<DB>>(k: K): K => {
    const plugin: KyselyPlugin = {
      transformQuery: ({ node, queryId }) => {
        if (on) recorded.push(k.getExecutor().compileQuery(node, queryId));
        return node;
      },
      transformResult: async ({ result }) => result,
    };
    const w = k.withPlugin(plugin) as K;
    const execute = w.executeQuery.bind(w);
    w.executeQuery = ((q: CompiledQuery | Parameters<typeof execute>[0]) => {
      if (on && !isCompilable(q)) recorded.push(q as CompiledQuery);
      return execute(q as never);
    }) as typeof w.executeQuery;
    return w;
  };
  return wrapStore(inner, wrap);
}

// ── counting ────────────────────────────────────────────────────────────────

interface Count {
  pages: number;
  rows: number;
  steps: number;
  plan: string;
  /** Backend CPU (µs) of the first timed run and the median of the others (--cpu). */
  cpu?: { first: number; median: number };
}

interface PgNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  'Actual Rows': number;
  'Actual Loops': number;
  'Rows Removed by Filter'?: number;
  'Shared Hit Blocks': number;
  'Shared Read Blocks': number;
  Plans?: PgNode[];
}

/** Rows the scans of history tables touched (returned and filtered out, over all loops), and the scans named. */
function scans(n: PgNode, out: { rows: number; names: string[] }) {
  const rel = n['Relation Name'] ?? '';
  const idx = n['Index Name'] ?? '';
  if (/Scan/.test(n['Node Type']) && /^(executions|execution_events|execution_logs|audit_log)/.test(rel || idx)) {
    out.rows += (n['Actual Rows'] + (n['Rows Removed by Filter'] ?? 0)) * n['Actual Loops'];
    out.names.push(`${n['Node Type']} ${idx || rel} ×${n['Actual Loops']}`);
  }
  for (const c of n.Plans ?? []) scans(c, out);
  return out;
}

async function countPostgres(db: Kysely<DB>, q: CompiledQuery, noSort: boolean): Promise<Count> {
  const out = await db.connection().execute(async (conn) => {
    await conn.executeQuery(CompiledQuery.raw('BEGIN'));
    try {
      if (noSort) await conn.executeQuery(CompiledQuery.raw('SET LOCAL enable_sort = off; SET LOCAL enable_incremental_sort = off'));
      return await conn.executeQuery<{ 'QUERY PLAN': Array<{ Plan: PgNode }> }>(
        CompiledQuery.raw(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${q.sql}`, [...q.parameters]),
      );
    } finally {
      await conn.executeQuery(CompiledQuery.raw('ROLLBACK'));
    }
  });
  const root = out.rows[0]!['QUERY PLAN'][0]!.Plan;
  const s = scans(root, { rows: 0, names: [] });
  return { pages: root['Shared Hit Blocks'] + root['Shared Read Blocks'], rows: s.rows, steps: 0, plan: s.names.join(', ') };
}

/** CPU time (ns) a process has run, from /proc (the scheduler's own count). */
const ranNs = (pid: number) => Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]);

/** The serving backend's CPU (µs) for `runs` runs of `q`, each in a transaction rolled back. */
async function cpuPostgres(db: Kysely<DB>, q: CompiledQuery, noSort: boolean, runs: number): Promise<Count['cpu']> {
  const us = await db.connection().execute(async (conn) => {
    const pid = (await conn.executeQuery<{ pid: number }>(CompiledQuery.raw('SELECT pg_backend_pid() AS pid'))).rows[0]!.pid;
    const out: number[] = [];
    for (let i = 0; i < runs; i++) {
      await conn.executeQuery(CompiledQuery.raw('BEGIN'));
      try {
        if (noSort) await conn.executeQuery(CompiledQuery.raw('SET LOCAL enable_sort = off; SET LOCAL enable_incremental_sort = off'));
        const t = ranNs(pid);
        await conn.executeQuery(CompiledQuery.raw(q.sql, [...q.parameters]));
        out.push((ranNs(pid) - t) / 1000);
      } finally {
        await conn.executeQuery(CompiledQuery.raw('ROLLBACK'));
      }
    }
    return out;
  });
  const rest = us.slice(1).sort((x, y) => x - y);
  return { first: Math.round(us[0]!), median: Math.round(rest[Math.floor((rest.length - 1) / 2)] ?? us[0]!) };
}

/** A bound value as an SQLite literal for the shell (numbers bare, text quoted). */
function sqliteLiteral(v: unknown): string {
  if (v === null || v === undefined) return 'NULL';
  if (typeof v === 'number' || typeof v === 'bigint') return String(v);
  if (typeof v === 'boolean') return v ? '1' : '0';
  return `'${String(v).replace(/'/g, "''")}'`;
}

async function countSqlite(db: Kysely<DB>, file: string, q: CompiledQuery): Promise<Count> {
  const plan = await db.executeQuery<{ detail: string }>(CompiledQuery.raw(`EXPLAIN QUERY PLAN ${q.sql}`, [...q.parameters]));
  const params = q.parameters.map((v, i) => `.parameter set ?${i + 1} ${sqliteLiteral(v)}`).join('\n');
  // A read-only shell on a fresh connection: every page the statement needs is a cache miss once.
  const script = `${params}\n.stats on\n${q.sql.replace(/\n/g, ' ')};\n`;
  const text = execFileSync('sqlite3', ['-readonly', file], { input: script, encoding: 'utf8', maxBuffer: 64 << 20 });
  const num = (re: RegExp) => Number(re.exec(text)?.[1] ?? NaN);
  return {
    pages: num(/Page cache misses:\s+(\d+)/),
    rows: 0,
    steps: num(/Virtual Machine Steps:\s+(\d+)/),
    plan: plan.rows.map((r) => r.detail).join(' | '),
  };
}

// ── the cycle ───────────────────────────────────────────────────────────────

async function open(): Promise<{ store: StoreAdapter; where: string; fresh: boolean }> {
  if (kind === 'sqlite') {
    const file = a.reuse ?? join(mkdtempSync(join(tmpdir(), 'baton-canary-reads-')), 'baton.sqlite');
    const store = openSqlite(file);
    await store.migrate();
    return { store, where: file, fresh: !a.reuse };
  }
  const schema = a.reuse ?? a.schema ?? `canary_reads_${process.pid}_${Date.now().toString(36)}`;
  const store = openPostgres({ url: a['pg-url']!, schema });
  await store.migrate();
  return { store, where: schema, fresh: !a.reuse };
}

async function main() {
  const keepAlive = setInterval(() => {}, 1_000);
  const { store, where, fresh } = await open();
  const engine = new Engine({ store, nodeId: 'bench' });
  const agents = Array.from({ length: 100 }, (_, i) => `hist-${String(i).padStart(3, '0')}`);
  try {
    if (fresh) {
      await createHistoryPool(engine);
      for (const [i, name] of agents.entries())
        await engine.agents.create(
          { name, max_parallel: 3, max_backlog: 1000, ...(i === KEYED_AGENT ? { keys: HISTORY_KEYS } : {}), ...historyFlowSettings(i) },
          'bench',
        );
    }
    const count = async (table: 'executions' | 'execution_events') =>
      Number(
        (
          await store.db
            .selectFrom(table)
            .select((eb) => eb.fn.countAll<number>().as('n'))
            .executeTakeFirstOrThrow()
        ).n,
      );
    log(`store ${kind} ${where}: ${await count('executions')} executions, ${await count('execution_events')} events`);
    // Checkpoints at the head, as after catching up (bench/canary-history.ts says why every one).
    const head = await store.db
      .selectFrom('execution_events')
      .select((eb) => eb.fn.max<number>('id').as('m'))
      .executeTakeFirst();
    await store.db.deleteFrom('canary_checkpoints').execute();
    for (const inv of CATALOGUE.filter(isActivity))
      await store.db
        .insertInto('canary_checkpoints')
        .values({ invariant: inv.id, event_id: Number(head?.m ?? 0), state: null, updated_at: Date.now() })
        .execute();
    await runCanaryOnce({ store });
    // A little new activity: submitted, a third run to completion (as the history bench's steady cycles).
    const activity = Number(a.activity);
    for (let k = 0; k < activity; k++)
      await engine.submit(agents[k % agents.length]!, { message: 'bench', ...historyKeyOf(k % agents.length, k) }, 'bench');
    for (let k = 0; k < Math.floor(activity / 3); k++) {
      const [row] = await engine.claim(agents[k % agents.length]!, { owner: 'bench' });
      if (row) await engine.complete(row.id, row.lease_token!, { status: 'succeeded' }, 'bench');
    }
    on = true;
    const report = await runCanaryOnce({ store: recording(store) });
    on = false;
    log(`cycle: ${report.duration_ms} ms, events read ${report.events?.read ?? '-'}, ${recorded.length} statements`);
    log(`load ${readFileSync('/proc/loadavg', 'utf8').trim()}`);
    const seen = new Map<string, number>();
    let noSort = false;
    const rows: Array<Count & { sql: string; times: number }> = [];
    for (const q of recorded) {
      if (/set_config\('enable_sort', 'off', true\)/.test(q.sql)) noSort = true;
      else if (/set_config\('enable_sort', \$1, true\)/.test(q.sql)) noSort = false;
      if (!/^\s*(select|with)\b/i.test(q.sql) || !HISTORY.test(q.sql)) continue;
      const key = q.sql + JSON.stringify(q.parameters);
      if (seen.has(key)) {
        rows[seen.get(key)!]!.times++;
        continue;
      }
      const c = kind === 'postgres' ? await countPostgres(store.db, q, noSort) : await countSqlite(store.db, where, q);
      if (kind === 'postgres' && Number(a.cpu) > 0) c.cpu = await cpuPostgres(store.db, q, noSort, Number(a.cpu) + 1);
      seen.set(key, rows.length);
      rows.push({ ...c, sql: q.sql, times: 1 });
    }
    let total = 0;
    let cpu = 0;
    for (const r of rows) {
      total += r.pages * r.times;
      cpu += (r.cpu?.median ?? 0) * r.times;
      const what =
        (kind === 'postgres' ? `${r.pages} pages, ${r.rows} rows` : `${r.pages} pages missed, ${r.steps} VM steps`) +
        (r.cpu ? `, backend CPU ${r.cpu.first} µs first, ${r.cpu.median} µs median` : '');
      log(`\n${what}${r.times > 1 ? ` (×${r.times})` : ''}: ${r.sql.replace(/\s+/g, ' ').slice(0, 400)}\n  ${r.plan}`);
    }
    log(`\ntotal: ${rows.length} distinct reads of history, ${total} pages${a.cpu !== '0' ? `, backend CPU ${cpu} µs (medians)` : ''}`);
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
