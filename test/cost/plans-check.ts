import { CompiledQuery, isCompilable, sql, type Kysely, type KyselyPlugin, type QueryId, type RootOperationNode } from 'kysely';
import { writeFileSync } from 'node:fs';
import pg from 'pg';
import { expect } from 'vitest';
import type { InOrder, StoreAdapter, Tx } from '../../src/store/adapter.ts';
import { sqliteFile } from '../../src/store/open.ts';
import type { DB, NewExecution } from '../../src/store/schema.ts';
import { openSqliteReader } from '../../src/store/sqlite-reader.ts';
import { PG_URL, type TestStore } from '../helpers/store.ts';

// The plan check of the cost tests (test/cost/plans.test.ts describes what it allows): a store
// that records every statement the real functions send through it, and the plan of each one that
// touches a history table, judged. One store per test file (planStore), which also forgets what an
// earlier file recorded: the files a Vitest worker runs share this module (isolate: false).

let ts: TestStore;
let store: StoreAdapter;

/** The store the plans are read from (the seeded one, unrecorded). */
export function planStore(t: TestStore): void {
  ts = t;
  store = t.store;
  recorded.length = 0;
}

/**
 * Statistics that predate a backlog, as an old store's are (the stale-plan tests): `count` past
 * executions (`row(i)`) written straight into executions, a thousand a transaction, then analysed;
 * on PostgreSQL with autovacuum off for executions, so nothing analyses it again while the test
 * queues its backlog (`tables`: more tables analysed with it).
 */
export async function seedStaleHistory(
  db: StoreAdapter,
  count: number,
  row: (i: number) => NewExecution,
  tables: readonly string[] = [],
): Promise<void> {
  for (let i = 0; i < count; i += 1000)
    await db.transaction((tx) =>
      db.insertMany(
        tx,
        'executions',
        Array.from({ length: Math.min(1000, count - i) }, (_, j) => row(i + j)),
      ),
    );
  if (db.kind === 'sqlite') {
    await sql`ANALYZE`.execute(db.db);
    return;
  }
  await sql`ALTER TABLE executions SET (autovacuum_enabled = false)`.execute(db.db);
  for (const table of ['executions', ...tables]) await sql.raw(`VACUUM ANALYZE ${table}`).execute(db.db);
}

/** A past execution for seedStaleHistory: `id` of `agent`, created at `at`, succeeded 10 ms later. */
export function pastExecution(id: string, agent: string, at: number): NewExecution {
  return {
    id,
    agent,
    trigger_kind: 'api',
    origin: '{}',
    message: 'past',
    payload: '{}',
    priority: 0,
    status: 'succeeded',
    attempt: 1,
    max_redeliveries: 3,
    timeout_seconds: 600,
    lease_ttl_seconds: 30,
    created_at: at,
    queued_at: at,
    started_at: at,
    completed_at: at + 10,
    duration_ms: 10,
    changed_at: at + 10,
    changed_by: 'seed',
    change_reason: 'succeeded',
  } as NewExecution;
}

// (The budget ledgers grow by one row per agent or pool with a budget per window: history too.)
export const HISTORY_TABLES = [
  'executions',
  'execution_events',
  'execution_logs',
  'audit_log',
  'agent_budget_ledger',
  'pool_budget_ledger',
];
/** Partial indexes that hold live rows only (queued / running): scanning one is not a history walk. */
export const LIVE_INDEXES = new Set([
  'executions_admission',
  'executions_running',
  'executions_serial_running',
  'executions_schedule_open',
  'executions_webhook_open',
  'executions_key_running',
  'executions_key_live',
  'executions_key_queued',
  'executions_key_admission',
  'executions_debounce_open',
]);
/** Indexes over all history: a seek into one is fine; a walk through one is not. */
export const HISTORY_INDEXES =
  /^(executions_(recent|agent_recent|status_recent|agent_status_recent|schedule_recent|schedule_status_recent|completed|schedule_tick|agent_finished)|execution_events_execution)$/;
/** PostgreSQL: a history scan expected to return more rows than this reads history (the seed has 30,000). */
export const MANY_ROWS = 1_000;

// ── recording ───────────────────────────────────────────────────────────────

/** A statement built for its run (its node, compiled again later), or one prepared once and run as compiled (preparedQuery). */
export type Recorded = ({ node: RootOperationNode; queryId: QueryId } | { compiled: CompiledQuery }) & { label: string };
export const recorded: Recorded[] = [];
let label = '';

/** The same store, with every statement the engine sends through it recorded (plan later). */
export function recordingStore(inner: StoreAdapter): StoreAdapter {
  const plugin: KyselyPlugin = {
    transformQuery: ({ node, queryId }) => {
      if (label) recorded.push({ node, queryId, label });
      return node;
    },
    transformResult: async ({ result }) => result,
  };
  const wrap = <K extends Kysely<DB>>(k: K) => {
    const w = k.withPlugin(plugin) as K;
    // A statement prepared once (src/store/prepared-query.ts) runs through executeQuery already compiled.
    const execute = w.executeQuery.bind(w);
    w.executeQuery = ((q: CompiledQuery | Parameters<typeof execute>[0]) => {
      if (label && !isCompilable(q)) recorded.push({ compiled: q as CompiledQuery, label });
      return execute(q as never);
    }) as typeof w.executeQuery;
    return w;
  };
  const proxy = Object.create(inner) as StoreAdapter;
  return Object.assign(proxy, {
    db: wrap(inner.db),
    reader: wrap(inner.reader),
    transaction: <T>(fn: (tx: Tx) => Promise<T>) => inner.transaction((tx) => fn(wrap(tx))),
    snapshot: <T>(fn: (tx: Tx) => Promise<T>) => inner.snapshot((tx) => fn(wrap(tx))),
    pruneTransaction: <T>(fn: (tx: Tx, contended: () => boolean, inOrder: InOrder) => Promise<T>) =>
      inner.pruneTransaction((tx, contended, inOrder) => fn(wrap(tx), contended, inOrder)),
  });
}

export async function during<T>(what: string, fn: () => Promise<T>): Promise<T> {
  label = what;
  try {
    return await fn();
  } finally {
    label = '';
  }
}

// ── plans ───────────────────────────────────────────────────────────────────

export interface Checked {
  label: string;
  sql: string;
  plan: string;
  problems: string[];
}

/** Table aliases in a compiled statement ("executions" as "r" → r is executions). */
export function historyNames(text: string): Set<string> {
  const names = new Set(HISTORY_TABLES);
  for (const m of text.matchAll(/"(\w+)" as "(\w+)"/g)) if (HISTORY_TABLES.includes(m[1]!)) names.add(m[2]!);
  return names;
}

/** A bound value as an SQL literal (untyped: the prepared statement's parameter type applies). */
export function literal(v: unknown): string {
  if (v === null || v === undefined) return 'NULL';
  const quote = (x: string) => `'${x.replace(/'/g, "''")}'`;
  if (Array.isArray(v)) return quote(`{${v.map((x) => `"${String(x).replace(/["\\]/g, '\\$&')}"`).join(',')}}`);
  return quote(String(v));
}

/**
 * PostgreSQL's generic plan of `text`, the one a named statement may keep for every later call
 * (PREPARE, then EXPLAIN EXECUTE under plan_cache_mode = force_generic_plan, on one connection).
 */
export async function explainGeneric(text: string, parameters: readonly unknown[]) {
  return store.db.connection().execute(async (conn) => {
    await conn.executeQuery(CompiledQuery.raw(`PREPARE plans_generic AS ${text}`));
    try {
      await conn.executeQuery(CompiledQuery.raw('SET plan_cache_mode = force_generic_plan'));
      return await conn.executeQuery<{ 'QUERY PLAN': unknown }>(
        CompiledQuery.raw(`EXPLAIN (FORMAT JSON) EXECUTE plans_generic(${parameters.map(literal).join(', ')})`),
      );
    } finally {
      await conn.executeQuery(CompiledQuery.raw('DEALLOCATE plans_generic'));
      await conn.executeQuery(CompiledQuery.raw('RESET plan_cache_mode'));
    }
  });
}

/**
 * The plans of the statements a function call runs (PostgreSQL), as auto_explain reports them to
 * the client, on a connection of its own; the call is rolled back.
 */
export async function nestedPlans(text: string, parameters: readonly unknown[], generic: boolean): Promise<string> {
  const client = new pg.Client({ connectionString: PG_URL, options: `-c search_path=${ts.location.schema}` });
  const notices: string[] = [];
  client.on('notice', (n) => notices.push(n.message ?? ''));
  await client.connect();
  try {
    await client.query("LOAD 'auto_explain'");
    await client.query('SET auto_explain.log_min_duration = 0');
    await client.query('SET auto_explain.log_nested_statements = on');
    await client.query('SET client_min_messages = log');
    if (generic) await client.query('SET plan_cache_mode = force_generic_plan');
    await client.query('BEGIN');
    await client.query(text, parameters as unknown[]);
    await client.query('ROLLBACK');
    return notices.join('\n');
  } finally {
    await client.end();
  }
}

export async function planOf(
  text: string,
  parameters: readonly unknown[],
  db: Kysely<DB> = store.db,
  generic = false,
): Promise<{ plan: string; problems: string[] }> {
  const names = historyNames(text);
  // The unfiltered first page walks an index in order and stops at its LIMIT: the one walk allowed.
  // A page after a cursor (or before `until`) must start where the cursor points: created_at is
  // then a range inside the index, or the page walks every newer row of its filter first.
  const cursor = /"?created_at"?\s*<=?\s*(\?|\$\d+)/i.test(text);
  // (A partial index's own `col IS NOT NULL` is no filter: the walk still stops at the LIMIT.)
  const unfiltered = text.replace(/\bwhere\s+"?\w+"?\s+is\s+not\s+null\b/i, '');
  const orderedWalk = !/\b(where|group by|count|sum|max|min)\b/i.test(unfiltered) && /\border by\b[^()]*\blimit\b/i.test(text);
  // One agent's queued rows (a backlog may hold a million of them, and a backlog grown since the
  // last ANALYZE looks empty to PostgreSQL): a seek on status alone reads every agent's backlog.
  const queuedByStatus = /"status" = 'queued'/.test(text) && /"agent" = /.test(text);
  if (store.kind === 'sqlite') {
    const out = await db.executeQuery<{ id: number; parent: number; detail: string }>(
      CompiledQuery.raw(`EXPLAIN QUERY PLAN ${text}`, [...parameters]),
    );
    const lines = out.rows.map((r) => r.detail);
    const problems: string[] = [];
    /** Parents (plan levels) that read through a history index: a temp B-tree there sorts what they found. */
    const historyLevels = new Set<number>();
    /** Parents that read queued rows: backlogs are bounded only by max_backlog (up to 1,000,000 an agent), so sorting them is not "few live rows". */
    const queuedLevels = new Set<number>();
    for (const { detail: d, parent } of out.rows) {
      const m = /^(SCAN|SEARCH) (\w+)(?: USING (?:COVERING )?INDEX (\w+))?/.exec(d);
      if (!m) continue;
      const [, op, table, index] = m;
      if (index === 'executions_admission') queuedLevels.add(parent);
      const onHistory =
        names.has(table!) || (index !== undefined && /^(executions|execution_events|execution_logs|audit_log)_/.test(index));
      if (!onHistory) continue;
      if (queuedByStatus && index === 'executions_status_recent' && /\(status=\?\)$/.test(d))
        problems.push(`one agent's queued rows sought by status alone (every agent's backlog read): ${d}`);
      if (index && HISTORY_INDEXES.test(index)) {
        historyLevels.add(parent);
        if (cursor && op === 'SEARCH' && /_recent$/.test(index) && !/created_at[<>]/.test(d))
          problems.push(`cursor is not a range in the index: ${d}`);
      }
      if (op === 'SCAN') {
        if (index && LIVE_INDEXES.has(index)) continue;
        // An ordered walk through a history index, or the table in rowid (primary key) order.
        if ((!index || HISTORY_INDEXES.test(index)) && orderedWalk && !lines.some((l) => /TEMP B-TREE/.test(l))) continue;
        problems.push(`full scan: ${d}`);
      }
    }
    // (A UNION ALL of seeks sorts each arm's LIMIT rows for the merge: that level reads a subquery, not history.)
    if (out.rows.some((r) => /USE TEMP B-TREE FOR (ORDER|GROUP) BY/.test(r.detail) && historyLevels.has(r.parent)))
      problems.push('sorts rows found through a history index');
    if (out.rows.some((r) => /USE TEMP B-TREE FOR ORDER BY/.test(r.detail) && queuedLevels.has(r.parent)))
      problems.push('sorts queued rows (a backlog may hold a million)');
    return { plan: lines.join('\n'), problems };
  }
  const out = generic
    ? await explainGeneric(text, parameters)
    : await db.executeQuery<{ 'QUERY PLAN': unknown }>(CompiledQuery.raw(`EXPLAIN (FORMAT JSON) ${text}`, [...parameters]));
  const root = (out.rows[0]!['QUERY PLAN'] as Array<{ Plan: PgNode }>)[0]!.Plan;
  const problems: string[] = [];
  const lines: string[] = [];
  const walk = (n: PgNode, depth: number, limited: boolean) => {
    const rel = n['Relation Name'];
    const idx = n['Index Name'];
    lines.push(
      `${'  '.repeat(depth)}${n['Node Type']}${rel ? ` on ${rel}` : ''}${idx ? ` using ${idx}` : ''} rows=${n['Plan Rows']}${n['Index Cond'] ? ` cond=${n['Index Cond']}` : ''}`,
    );
    const history = (rel && HISTORY_TABLES.includes(rel)) || (idx && /^(executions|execution_events|execution_logs|audit_log)_/.test(idx));
    if (history) {
      if (n['Node Type'] === 'Seq Scan') problems.push(`Seq Scan on ${rel}`);
      const historyIndex = idx !== undefined && HISTORY_INDEXES.test(idx);
      if (historyIndex && !n['Index Cond'] && !(orderedWalk && limited)) problems.push(`full walk of ${idx}`);
      if (queuedByStatus && idx === 'executions_status_recent' && /^\(\(status\)::text = 'queued'::text\)$/.test(n['Index Cond'] ?? ''))
        problems.push(`one agent's queued rows sought by status alone (every agent's backlog read) in ${idx}`);
      if (historyIndex && cursor && /_recent$/.test(idx!) && !/created_at [<>]/.test(n['Index Cond'] ?? ''))
        problems.push(`cursor is not a range in ${idx}`);
      // (A bitmap heap scan fed by live indexes alone fetches live rows only.)
      const liveBitmap =
        n['Node Type'] === 'Bitmap Heap Scan' && bitmapIndexes(n).every((i) => LIVE_INDEXES.has(i)) && bitmapIndexes(n).length > 0;
      if (!(idx && LIVE_INDEXES.has(idx)) && !liveBitmap && n['Plan Rows'] > MANY_ROWS && !limited)
        problems.push(`${n['Node Type']} on ${rel ?? idx} expects ${n['Plan Rows']} rows`);
    }
    const type = n['Node Type'];
    const nextLimited =
      type === 'Limit' ? true : type === 'Sort' || type === 'Aggregate' || type === 'Hash' || type === 'Incremental Sort' ? false : limited;
    for (const c of n.Plans ?? []) walk(c, depth + 1, nextLimited);
  };
  walk(root, 0, false);
  return { plan: lines.join('\n'), problems };
}
/** The indexes a bitmap heap scan reads through (its Bitmap Index Scans, under any BitmapAnd/Or). */
function bitmapIndexes(n: PgNode): string[] {
  return (n.Plans ?? []).flatMap((c) =>
    c['Node Type'] === 'Bitmap Index Scan' ? [c['Index Name'] ?? ''] : /^Bitmap(And|Or)$/.test(c['Node Type']) ? bitmapIndexes(c) : [],
  );
}
interface PgNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  'Index Cond'?: string;
  'Plan Rows': number;
  Plans?: PgNode[];
}

export const compiledOf = (r: Recorded) => ('compiled' in r ? r.compiled : store.db.getExecutor().compileQuery(r.node, r.queryId));

/** Plan every recorded statement (once per distinct SQL) that reads or writes a history table. */
export async function checkRecorded(db: Kysely<DB> = store.db): Promise<Checked[]> {
  const seen = new Set<string>();
  const out: Checked[] = [];
  for (const r of recorded) {
    const compiled = compiledOf(r);
    const text = compiled.sql;
    if (!/^\s*(select|update|delete|insert|with)\b/i.test(text)) continue;
    if (!HISTORY_TABLES.some((t) => text.includes(`"${t}"`) || new RegExp(`\\b${t}\\b`).test(text))) continue;
    if (/^\s*insert\b/i.test(text) && !/\bselect\b/i.test(text)) continue; // VALUES only: nothing read
    const key = `${r.label}\u0000${text}`;
    if (seen.has(key)) continue;
    seen.add(key);
    const { plan, problems } = await planOf(text, compiled.parameters, db);
    out.push({ label: r.label, sql: text, plan, problems });
  }
  return out;
}

export function report(checked: Checked[]): string {
  return checked
    .filter((c) => c.problems.length > 0)
    .map((c) => `[${c.label}] ${c.problems.join('; ')}\n  ${c.sql}\n  ${c.plan.replace(/\n/g, '\n  ')}`)
    .join('\n\n');
}

/**
 * Check every recorded statement: each label in `labels` sent a statement on history (a path that
 * sent nothing would pass unchecked), and no plan reads history. SQLite as deployed never runs
 * ANALYZE, so its planner has no statistics at all: the same statements must seek without them
 * too, planned on a new connection. One that loaded statistics keeps the table sizes it read
 * (about 30,000 rows here) after they are deleted, where a connection that never saw any assumes
 * a million rows a table, and chooses otherwise. BATON_PLANS_DUMP=FILE writes every plan there.
 * `absent`: labels whose statements must touch no history table at all.
 */
export async function expectPlansSeek(labels: readonly string[], absent: readonly string[] = []): Promise<void> {
  const checked = await checkRecorded();
  const seen = new Set(checked.map((c) => c.label));
  for (const l of labels) expect(seen, `no statement on history recorded for ${l}`).toContain(l);
  for (const l of absent) expect(seen, `${l} was expected to read no history table`).not.toContain(l);
  if (process.env.BATON_PLANS_DUMP)
    writeFileSync(
      process.env.BATON_PLANS_DUMP,
      checked.map((c) => `[${c.label}] ${c.sql}\n  ${c.plan.replace(/\n/g, '\n  ')}`).join('\n\n'),
    );
  expect(report(checked)).toBe('');
  if (store.kind !== 'sqlite') return;
  await sql`DROP TABLE sqlite_stat1`.execute(store.db);
  await sql`DROP TABLE IF EXISTS sqlite_stat4`.execute(store.db);
  const fresh = openSqliteReader(sqliteFile(ts.location)!);
  try {
    expect(report(await checkRecorded(fresh)), 'without statistics').toBe('');
  } finally {
    await fresh.destroy();
  }
}

/** Rows a PostgreSQL plan node touched: those it returned and those its filters threw away, over all its loops. */
function rowsTouched(n: PgRun): number {
  const own = (n['Actual Rows'] + (n['Rows Removed by Filter'] ?? 0) + (n['Rows Removed by Index Recheck'] ?? 0)) * n['Actual Loops'];
  const onExecutions = n['Relation Name'] === 'executions' || /^executions_/.test(n['Index Name'] ?? '');
  return (onExecutions && /Scan/.test(n['Node Type']) ? own : 0) + (n.Plans ?? []).reduce((s, c) => s + rowsTouched(c), 0);
}
interface PgRun {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  'Actual Rows': number;
  'Actual Loops': number;
  'Rows Removed by Filter'?: number;
  'Rows Removed by Index Recheck'?: number;
  Plans?: PgRun[];
}

/**
 * The statements recorded for `labels` read at most `most` rows of executions each, counted as
 * PostgreSQL ran them (EXPLAIN ANALYZE, rolled back): a read that walks a deep backlog fails
 * here even when its plan is a seek into a live index. SQLite reports no rows read: there its
 * plans are judged by planOf alone.
 */
export async function expectBacklogUnread(labels: readonly string[], most: number): Promise<void> {
  const seen = new Set<string>();
  const problems: string[] = [];
  // The planner settings each statement ran with (src/engine/candidates.ts, inIndexOrder): replayed.
  let noSort = false;
  for (const r of recorded) {
    if (store.kind === 'postgres' && r.label) {
      const text = compiledOf(r).sql;
      if (/set_config\('enable_sort', 'off', true\)/.test(text)) noSort = true;
      else if (/set_config\('enable_sort', \$1, true\)/.test(text)) noSort = false;
    }
    if (!labels.includes(r.label)) continue;
    seen.add(r.label);
    if (store.kind !== 'postgres') continue;
    const compiled = compiledOf(r);
    if (!/^\s*(select|with)\b/i.test(compiled.sql) || !/\bexecutions\b/.test(compiled.sql)) continue;
    const sorts = !noSort;
    const touched = await store.db.connection().execute(async (conn) => {
      await conn.executeQuery(CompiledQuery.raw('BEGIN'));
      try {
        if (!sorts) await conn.executeQuery(CompiledQuery.raw('SET LOCAL enable_sort = off; SET LOCAL enable_incremental_sort = off'));
        const out = await conn.executeQuery<{ 'QUERY PLAN': Array<{ Plan: PgRun }> }>(
          CompiledQuery.raw(`EXPLAIN (ANALYZE, FORMAT JSON) ${compiled.sql}`, [...compiled.parameters]),
        );
        return rowsTouched(out.rows[0]!['QUERY PLAN'][0]!.Plan);
      } finally {
        await conn.executeQuery(CompiledQuery.raw('ROLLBACK'));
      }
    });
    if (touched > most) problems.push(`[${r.label}] read ${touched} rows of executions: ${compiled.sql}`);
  }
  for (const l of labels) expect(seen, `no statement recorded for ${l}`).toContain(l);
  expect(problems.join('\n')).toBe('');
}

interface PgBuffers extends PgRun {
  'Index Cond'?: string;
  'Shared Hit Blocks': number;
  'Shared Read Blocks': number;
  Plans?: PgBuffers[];
}

/**
 * The statements recorded for `labels` that read executions seek `index` by agent (its first
 * column: the agent's entries only), and on PostgreSQL read at most `most` pages each, counted as
 * they ran (EXPLAIN (ANALYZE, BUFFERS), rolled back, under the planner settings they ran with).
 * SQLite: by its plan (SEARCH … USING INDEX index (agent=?…)).
 */
export async function expectAgentSeek(labels: readonly string[], index: string, most: number): Promise<void> {
  const problems: string[] = [];
  const seen = new Set<string>();
  let noSort = false;
  for (const r of recorded) {
    const compiled = compiledOf(r);
    if (store.kind === 'postgres' && r.label) {
      if (/set_config\('enable_sort', 'off', true\)/.test(compiled.sql)) noSort = true;
      else if (/set_config\('enable_sort', \$1, true\)/.test(compiled.sql)) noSort = false;
    }
    if (!labels.includes(r.label) || !/^\s*(select|with)\b/i.test(compiled.sql) || !/\bexecutions\b/.test(compiled.sql)) continue;
    if (store.kind === 'sqlite') {
      const out = await store.db.executeQuery<{ detail: string }>(
        CompiledQuery.raw(`EXPLAIN QUERY PLAN ${compiled.sql}`, [...compiled.parameters]),
      );
      const lines = out.rows.map((x) => x.detail);
      if (lines.some((l) => new RegExp(`USING (COVERING )?INDEX ${index} \\(agent=\\?`).test(l))) seen.add(r.label);
      continue;
    }
    const root = await store.db.connection().execute(async (conn) => {
      await conn.executeQuery(CompiledQuery.raw('BEGIN'));
      try {
        if (noSort) await conn.executeQuery(CompiledQuery.raw('SET LOCAL enable_sort = off; SET LOCAL enable_incremental_sort = off'));
        const out = await conn.executeQuery<{ 'QUERY PLAN': Array<{ Plan: PgBuffers }> }>(
          CompiledQuery.raw(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${compiled.sql}`, [...compiled.parameters]),
        );
        return out.rows[0]!['QUERY PLAN'][0]!.Plan;
      } finally {
        await conn.executeQuery(CompiledQuery.raw('ROLLBACK'));
      }
    });
    const nodes: PgBuffers[] = [];
    const walk = (n: PgBuffers) => (nodes.push(n), (n.Plans ?? []).forEach(walk));
    walk(root);
    if (nodes.some((n) => n['Index Name'] === index && /^\(+(\w+\.)?agent = /.test(n['Index Cond'] ?? ''))) seen.add(r.label);
    const pages = root['Shared Hit Blocks'] + root['Shared Read Blocks'];
    if (pages > most) problems.push(`[${r.label}] read ${pages} pages: ${compiled.sql}`);
  }
  for (const l of labels) expect(seen, `${l}: no statement sought ${index} by agent`).toContain(l);
  expect(problems.join('\n')).toBe('');
}
