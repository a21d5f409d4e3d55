/**
 * The plans of a claim's and a completion's statements beside a long history and a deep backlog,
 * and the longest synchronous step they hold the event loop for. Measures; never asserts.
 *
 *   node --import tsx bench/claim-paths-plans.ts --store sqlite --reuse <1M file> --backlog 100000
 *   node --import tsx bench/claim-paths-plans.ts --store postgres --reuse <1M schema> --backlog 100000
 *
 * Opens a store (a fresh one with the history bench's agents, or `--reuse` one filled before by
 * bench/canary-history.ts), tops agent hist-001's queue up to `backlog` queued tasks (through the
 * engine), then runs, recording every statement:
 *   - a claim on the 99 other agents, none of them woken (on PostgreSQL the read of the agents a
 *     look would find nothing for first: src/engine/empty-looks.ts),
 *   - a claim of 3 of hist-001's tasks (its admission: on PostgreSQL baton_claim_many and the
 *     takes of baton_take_rows),
 *   - their completion together (PostgreSQL: completeManyWithLease's UPDATE … FROM unnest; SQLite:
 *     completeWithLease each, as commitTogether runs them), rolled back,
 *   - a waiting claim on two agents widened (as POST /v1/claim/widen does) by hist-001 and eight
 *     others,
 *   - a claim of a pooled agent (hist-011: a gathered admission, its takes baton_take_rows),
 * and prints each distinct statement's plan with what it read: PostgreSQL EXPLAIN (ANALYZE,
 * BUFFERS), rolled back (a function's nested statements through auto_explain, after seven calls
 * on the connection so its plpgsql plans are the ones it keeps, and again under
 * plan_cache_mode = force_generic_plan); SQLite EXPLAIN QUERY PLAN and the sqlite3 shell's `.stats`
 * (pages missed on a fresh connection, virtual machine steps), writes rolled back.
 * Then (`--times N`, default 20) runs each path N times and reports the event loop's longest delay
 * and the CPU of its busiest stretch (bench/canary-history.ts, stallProbe), against an idle baseline.
 * With `--look N` it also times a claim's look at N agents with nothing queued (agents look-0000…
 * made if missing, each claimed once first: a look within the stamp interval writes nothing).
 * Options: --store sqlite|postgres, --reuse <file|schema>, --schema NAME, --backlog N (default 0),
 * --times N, --look N, --keep, --pg-url URL.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';
import { CompiledQuery, isCompilable, type Kysely, type KyselyPlugin } from 'kysely';
import pg from 'pg';
import { Engine } from '../src/engine/engine.ts';
import { completeManyWithLease, completeWithLease } from '../src/engine/transitions/complete.ts';
import type { StoreAdapter } from '../src/store/adapter.ts';
import { openPostgres } from '../src/store/postgres.ts';
import type { DB, ExecutionRow } from '../src/store/schema.ts';
import { openSqlite } from '../src/store/sqlite.ts';
import { createHistoryPool, HISTORY_KEYS, historyFlowSettings, KEYED_AGENT, POOLED_AGENTS } from './lib/history-flow.ts';
import { wrapStore } from './lib/wrap-store.ts';

const { values: a } = parseArgs({
  options: {
    store: { type: 'string', default: 'sqlite' },
    reuse: { type: 'string' },
    schema: { type: 'string' },
    backlog: { type: 'string', default: '0' },
    times: { type: 'string', default: '20' },
    look: { type: 'string', default: '0' },
    keep: { type: 'boolean', default: false },
    'pg-url': { type: 'string', default: process.env.BATON_BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test' },
  },
});
const kind = a.store === 'postgres' ? 'postgres' : 'sqlite';
const log = (s: string) => process.stdout.write(s + '\n');
const load = () => readFileSync('/proc/loadavg', 'utf8').trim().split(' ').slice(0, 3).join(' ');
const AGENTS = Array.from({ length: 100 }, (_, i) => `hist-${String(i).padStart(3, '0')}`);
const DEEP = AGENTS[1]!;
/** Agents without flow settings, not the deep one: the widening's and the quiet look's. */
const PLAIN = AGENTS.filter((n, i) => n !== DEEP && Object.keys(historyFlowSettings(i)).length === 0);

// ── recording ───────────────────────────────────────────────────────────────

const recorded: { label: string; compiled: CompiledQuery }[] = [];
let label = '';

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

// ── the paths ───────────────────────────────────────────────────────────────

class Rollback extends Error {}

interface Paths {
  quietLook(): Promise<ExecutionRow[]>;
  claimDeep(): Promise<ExecutionRow[]>;
  completeTogether(rows: readonly ExecutionRow[]): Promise<void>;
  widened(): Promise<ExecutionRow[]>;
  done(rows: readonly ExecutionRow[]): Promise<void>;
}

function paths(engine: Engine, store: StoreAdapter): Paths {
  return {
    quietLook: () =>
      engine.claimAny(
        AGENTS.filter((n) => n !== DEEP).map((agent) => ({ agent, max: 3 })),
        { owner: 'bench', waitMs: 0 }, // looks at every agent, none known idle
      ),
    claimDeep: () => engine.claim(DEEP, { owner: 'bench', max: 3 }),
    completeTogether: async (rows) => {
      const jobs = rows.map((r) => ({
        id: r.id,
        token: r.lease_token!,
        outcome: { status: 'succeeded' as const, result: '{"ok":true}', error: null, usage: null },
        now: Date.now(),
        actor: 'bench',
      }));
      await store
        .transaction(async (tx) => {
          if (store.kind === 'postgres') await completeManyWithLease(tx, jobs);
          else for (const j of jobs) await completeWithLease(tx, j.id, j.token, j.outcome, j.now, j.actor);
          throw new Rollback();
        })
        .catch((err) => {
          if (!(err instanceof Rollback)) throw err;
        });
    },
    widened: async () => {
      const widening: { add?: (items: readonly { agent: string; max: number }[]) => boolean } = {};
      const claim = engine.claimAny(
        PLAIN.slice(0, 2).map((agent) => ({ agent, max: 3 })),
        { owner: 'bench', waitMs: 5_000, widening },
      );
      for (let i = 0; i < 200 && !widening.add; i++) await new Promise((r) => setTimeout(r, 5));
      await new Promise((r) => setTimeout(r, 20)); // parked
      const took = widening.add?.([DEEP, ...PLAIN.slice(2, 10)].map((agent) => ({ agent, max: 3 })));
      if (!took) throw new Error('the widening did not take');
      return claim;
    },
    done: async (rows) => {
      for (const r of rows) await engine.complete(r.id, r.lease_token!, { status: 'succeeded' }, 'bench');
    },
  };
}

// ── plans ───────────────────────────────────────────────────────────────────

const pgClient = async (schema: string) => {
  const c = new pg.Client({ connectionString: a['pg-url'], options: `-c search_path=${schema}` });
  await c.connect();
  return c;
};

/** PostgreSQL: the statement under EXPLAIN (ANALYZE, BUFFERS), or a function call's nested plans through auto_explain; rolled back. */
async function explainPostgres(schema: string, q: CompiledQuery, noSort: boolean): Promise<string> {
  const fn = /\bbaton_\w+\s*\(/.test(q.sql);
  const out: string[] = [];
  for (const generic of fn ? [false, true] : [false]) {
    const c = await pgClient(schema);
    const notices: string[] = [];
    c.on('notice', (n) => notices.push(n.message ?? ''));
    try {
      const run = async (text: string) => {
        await c.query('BEGIN');
        try {
          if (noSort) await c.query('SET LOCAL enable_sort = off; SET LOCAL enable_incremental_sort = off');
          return await c.query(text, [...q.parameters] as unknown[]);
        } finally {
          await c.query('ROLLBACK');
        }
      };
      if (!fn) {
        const r = await run(`EXPLAIN (ANALYZE, BUFFERS) ${q.sql}`);
        out.push(r.rows.map((x: Record<string, string>) => x['QUERY PLAN']).join('\n'));
        continue;
      }
      if (generic) await c.query('SET plan_cache_mode = force_generic_plan');
      for (let i = 0; i < 7; i++) await run(q.sql); // the plans a connection keeps
      await c.query("LOAD 'auto_explain'");
      await c.query('SET auto_explain.log_min_duration = 0');
      await c.query('SET auto_explain.log_nested_statements = on');
      await c.query('SET auto_explain.log_analyze = on');
      await c.query('SET auto_explain.log_buffers = on');
      await c.query('SET client_min_messages = log');
      notices.length = 0;
      await run(q.sql);
      out.push(`${generic ? '(force_generic_plan)' : '(after seven calls)'}\n${notices.join('\n')}`);
    } finally {
      await c.end();
    }
  }
  return out.join('\n');
}

function sqliteLiteral(v: unknown): string {
  if (v === null || v === undefined) return 'NULL';
  if (typeof v === 'number' || typeof v === 'bigint') return String(v);
  if (typeof v === 'boolean') return v ? '1' : '0';
  return `'${String(v).replace(/'/g, "''")}'`;
}

/** SQLite: EXPLAIN QUERY PLAN, and the shell's .stats on a fresh connection (a write rolled back). */
async function explainSqlite(db: Kysely<DB>, file: string, q: CompiledQuery): Promise<string> {
  const plan = await db.executeQuery<{ detail: string }>(CompiledQuery.raw(`EXPLAIN QUERY PLAN ${q.sql}`, [...q.parameters]));
  const params = q.parameters.map((v, i) => `.parameter set ?${i + 1} ${sqliteLiteral(v)}`).join('\n');
  const write = !/^\s*(select|with)\b/i.test(q.sql) || /\breturning\b/i.test(q.sql);
  // (The shell's SQLite is older than the server's: octet_length spelled as it had it.)
  const body = `${q.sql.replace(/\n/g, ' ').replace(/octet_length\(([^()]*)\)/g, 'length(CAST($1 AS BLOB))')};`;
  const script = `${params}\n.timeout 5000\n${write ? 'BEGIN;\n' : ''}.stats on\n${body}\n.stats off\n${write ? 'ROLLBACK;\n' : ''}`;
  let text: string;
  try {
    text = execFileSync('sqlite3', write ? [file] : ['-readonly', file], { input: script, encoding: 'utf8', maxBuffer: 64 << 20 });
  } catch (err) {
    text = `shell: ${String((err as { stderr?: string }).stderr ?? err).split('\n')[0]}`;
  }
  const num = (re: RegExp) => Number(re.exec(text)?.[1] ?? NaN);
  return `${plan.rows.map((r) => r.detail).join('\n')}\n→ ${num(/Page cache misses:\s+(\d+)/)} pages missed, ${num(/Virtual Machine Steps:\s+(\d+)/)} VM steps`;
}

async function explainAll(store: StoreAdapter, where: string): Promise<void> {
  const seen = new Set<string>();
  let noSort = false;
  for (const { label: l, compiled } of recorded) {
    const text = compiled.sql;
    if (/set_config\('enable_sort', 'off', true\)/.test(text)) noSort = true;
    else if (/set_config\('enable_sort', \$1, true\)/.test(text)) noSort = false;
    if (!/^\s*(select|with|update|delete|insert)\b/i.test(text) || /set_config|pg_advisory|^\s*select 1\b/i.test(text)) continue;
    if (/^\s*insert\b/i.test(text) && !/\bselect\b/i.test(text)) continue; // VALUES only
    const key = `${l}\u0000${text}`;
    if (seen.has(key)) continue;
    seen.add(key);
    log(`\n[${l}] ${text.replace(/\s+/g, ' ').slice(0, 600)}\n  params ${JSON.stringify(compiled.parameters).slice(0, 200)}`);
    const plan =
      store.kind === 'postgres' ? await explainPostgres(where, compiled, noSort) : await explainSqlite(store.db, where, compiled);
    log(`  ${plan.replace(/\n/g, '\n  ')}`);
  }
}

// ── the event loop ──────────────────────────────────────────────────────────

/** The busiest stretch between 2 ms timer turns: its wall time and the CPU the process used in it (bench/canary-history.ts). */
function stallProbe() {
  let last = performance.now();
  let lastCpu = process.cpuUsage();
  let worst = { wall: 0, cpu: 0 };
  const t = setInterval(() => {
    const now = performance.now();
    const cpu = process.cpuUsage(lastCpu);
    const used = Math.min(now - last, (cpu.user + cpu.system) / 1000);
    if (used > worst.cpu) worst = { wall: Math.round(now - last), cpu: Math.round(used) };
    last = now;
    lastCpu = process.cpuUsage();
  }, 2);
  return { stop: () => (clearInterval(t), worst) };
}

async function timed(what: string, times: number, fn: () => Promise<unknown>): Promise<void> {
  const h = monitorEventLoopDelay({ resolution: 1 });
  h.enable();
  const probe = stallProbe();
  const t0 = performance.now();
  for (let i = 0; i < times; i++) await fn();
  const ms = (performance.now() - t0) / times;
  const worst = probe.stop();
  h.disable();
  log(
    `${what.padEnd(34)} ${ms.toFixed(1)} ms a run; event-loop delay max ${(h.max / 1e6).toFixed(1)} ms, p99 ${(h.percentile(99) / 1e6).toFixed(1)} ms; busiest stretch ${worst.cpu} ms CPU (in a ${worst.wall} ms gap); load ${load()}`,
  );
}

// ── store ───────────────────────────────────────────────────────────────────

async function open(): Promise<{ store: StoreAdapter; where: string; fresh: boolean }> {
  if (kind === 'sqlite') {
    const file = a.reuse ?? join(mkdtempSync(join(tmpdir(), 'baton-claim-plans-')), 'baton.sqlite');
    const store = openSqlite(file);
    await store.migrate();
    return { store, where: file, fresh: !a.reuse };
  }
  const schema = a.reuse ?? a.schema ?? `claim_plans_${process.pid}_${Date.now().toString(36)}`;
  const store = openPostgres({ url: a['pg-url']!, schema });
  await store.migrate();
  return { store, where: schema, fresh: !a.reuse };
}

async function topUp(store: StoreAdapter, engine: Engine, want: number): Promise<number> {
  // (Its cap raised: the rows a claim holds while its statements are replayed leave room for more.)
  await engine.agents.update(DEEP, { max_backlog: 1_000_000, max_parallel: 100 }, 'bench');
  const queued = async () =>
    Number(
      (
        await store.db
          .selectFrom('executions')
          .select((eb) => eb.fn.countAll<number>().as('n'))
          .where('agent', '=', DEEP)
          .where('status', '=', 'queued')
          .executeTakeFirstOrThrow()
      ).n,
    );
  const have = await queued();
  for (let i = have; i < want; i += 1000) {
    const items = Array.from({ length: Math.min(1000, want - i) }, (_, j) => ({ message: `deep ${i + j}` }));
    await engine.submitMany(DEEP, items, 'bench');
  }
  return queued();
}

async function main() {
  const keepAlive = setInterval(() => {}, 1_000);
  const { store, where, fresh } = await open();
  const setup = new Engine({ store, nodeId: 'bench-setup' });
  const rec = recording(store);
  const engine = new Engine({ store: rec, nodeId: 'bench' });
  try {
    if (fresh) {
      await createHistoryPool(setup);
      for (const [i, name] of AGENTS.entries())
        await setup.agents.create(
          { name, max_parallel: 3, max_backlog: 1000, ...(i === KEYED_AGENT ? { keys: HISTORY_KEYS } : {}), ...historyFlowSettings(i) },
          'bench',
        );
    }
    const t0 = performance.now();
    const deep = await topUp(store, setup, Math.max(Number(a.backlog), 20));
    const executions = Number(
      (
        await store.db
          .selectFrom('executions')
          .select((eb) => eb.fn.countAll<number>().as('n'))
          .executeTakeFirstOrThrow()
      ).n,
    );
    log(
      `store ${kind} ${where}: ${executions} executions, ${deep} queued on ${DEEP} (topped up in ${((performance.now() - t0) / 1000).toFixed(1)} s)`,
    );
    log(
      `git ${execFileSync('git', ['rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim()}, ${new Date().toISOString()}, load ${load()}`,
    );
    const p = paths(engine, rec);
    // Claim stamps written (a look within the stamp interval writes nothing), the agents' queues as they are.
    for (const rows of [await p.quietLook(), await p.quietLook()]) await p.done(rows);
    await during('quiet look (99 agents)', () => p.quietLook()).then(p.done);
    const claimed = await during('claim 3 of the deep agent', () => p.claimDeep());
    await during('complete together', () => p.completeTogether(claimed));
    const widened = await during('widened claim', () => p.widened());
    // A pooled agent's admission is gathered: its takes are baton_take_rows (PostgreSQL).
    const POOLED = AGENTS[POOLED_AGENTS[0]!]!;
    await setup.submitMany(POOLED, [{ message: 'pooled 1' }, { message: 'pooled 2' }], 'bench');
    const pooled = await during('claim 2 of a pooled agent', () => engine.claim(POOLED, { owner: 'bench', max: 2 }));
    log(`recorded ${recorded.length} statements; load ${load()}`);
    // Replayed while the claimed rows are still running (the completion's compare-and-set finds them).
    await explainAll(store, where);
    await p.done(claimed);
    await p.done(widened);
    await p.done(pooled);

    const times = Number(a.times);
    log(`\n═══ the event loop, ${times} runs each ═══`);
    const h = monitorEventLoopDelay({ resolution: 1 });
    h.enable();
    const idle = stallProbe();
    await new Promise((r) => setTimeout(r, 3_000));
    const w = idle.stop();
    h.disable();
    log(
      `${'idle, 3 s'.padEnd(34)} event-loop delay max ${(h.max / 1e6).toFixed(1)} ms; busiest stretch ${w.cpu} ms CPU (in a ${w.wall} ms gap)`,
    );
    // Enough queued on the deep agent for every timed claim to take 3.
    await topUp(store, setup, Math.max(Number(a.backlog), 6 * times + 20));
    const plain = paths(setup, store);
    await timed('quiet look (99 agents)', times, async () => plain.done(await plain.quietLook()));
    await timed('claim 3 of the deep agent + done', times, async () => plain.done(await plain.claimDeep()));
    const held = await plain.claimDeep();
    await timed('complete together (rolled back)', times, () => plain.completeTogether(held));
    await plain.done(held);
    await timed('widened claim + done', times, async () => plain.done(await plain.widened()));
    const many = Number(a.look);
    if (many > 0) {
      const names = Array.from({ length: many }, (_, i) => `look-${String(i).padStart(4, '0')}`);
      const have = new Set(
        (await store.db.selectFrom('agents').select('name').where('name', 'like', 'look-%').execute()).map((r) => r.name),
      );
      for (const name of names) if (!have.has(name)) await setup.agents.create({ name, max_parallel: 3, max_backlog: 1000 }, 'bench');
      const items = names.map((agent) => ({ agent, max: 3 }));
      await setup.claimAny(items, { owner: 'bench', waitMs: 0 }); // the stamps
      await timed(`quiet look (${many} agents)`, times, () => setup.claimAny(items, { owner: 'bench', waitMs: 0 }));
    }
  } finally {
    engine.close();
    setup.close();
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
