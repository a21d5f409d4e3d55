/**
 * Steady canary cycles on two or more stores, interleaved, timed per statement. Measures; never asserts.
 *
 *   node --import tsx bench/canary-steady.ts --store sqlite --reuse new --reuse FILE [--cycles 6]
 *   node --import tsx bench/canary-steady.ts --store postgres --reuse new --reuse SCHEMA [--cycles 6]
 *
 * Each `--reuse` names a store filled before by bench/canary-history.ts (SQLite file /
 * PostgreSQL schema), or `new`: a fresh empty store with the history bench's agents (dropped at
 * the end unless --keep). Every store's checkpoints are put at the event log's head and its queued
 * rows topped up to the deepest store's, so that every store holds the same live work and differs
 * only in its history. Then, round after round and store after store (A B A B …): a little new
 * activity (as bench/canary-history.ts's steady cycles: --activity tasks submitted, a third of
 * them run to completion), then one cycle, timed: wall, the main thread's busy time (event-loop
 * utilisation) and CPU, the process's CPU (on SQLite the reader thread's too), on PostgreSQL the
 * CPU of the backends serving this process (from /proc: the server must run on this machine), and each statement's wall
 * time from its send to its result, summed per statement shape. The first round is a warm-up and
 * is not summarised.
 * Options: --store sqlite|postgres, --reuse (repeatable), --cycles N (default 6), --activity N
 * (default 300), --top N (statement shapes listed, default 12), --schema NAME (the `new` PostgreSQL
 * store's), --keep, --pg-url URL.
 */
import { mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import type { Kysely, KyselyPlugin, QueryId } from 'kysely';
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
    reuse: { type: 'string', multiple: true, default: [] },
    cycles: { type: 'string', default: '6' },
    activity: { type: 'string', default: '300' },
    schema: { type: 'string' },
    top: { type: 'string', default: '12' },
    keep: { type: 'boolean', default: false },
    'pg-url': { type: 'string', default: process.env.BATON_BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test' },
  },
});
const kind = a.store === 'postgres' ? 'postgres' : 'sqlite';
const log = (s: string) => process.stdout.write(s + '\n');
const load = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
const AGENTS = Array.from({ length: 100 }, (_, i) => `hist-${String(i).padStart(3, '0')}`);

/** A statement's shape: its text with bound lists folded, so one IN list of any length is one shape. */
const shape = (q: string) =>
  q
    .replace(/\s+/g, ' ')
    .replace(/(\$\d+|\?)(, (\$\d+|\?))+/g, '…')
    .replace(/\$\d+/g, '?')
    .slice(0, 170);

/** CPU time (ns) a task has run, from /proc (the scheduler's own count, not ticks); 0 when gone. */
function ranNs(path: string): number {
  try {
    return Number(readFileSync(path, 'utf8').split(' ')[0]);
  } catch {
    return 0;
  }
}
/** The main thread's CPU time. */
const mainNs = () => ranNs(`/proc/self/task/${process.pid}/schedstat`);

/** The local TCP ports of this process's sockets. */
function localPorts(): number[] {
  const inodes = new Set<string>();
  for (const fd of readdirSync('/proc/self/fd')) {
    try {
      const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/self/fd/${fd}`));
      if (m) inodes.add(m[1]!);
    } catch {
      // closed meanwhile
    }
  }
  const ports: number[] = [];
  for (const f of ['/proc/net/tcp', '/proc/net/tcp6']) {
    for (const line of readFileSync(f, 'utf8').split('\n').slice(1)) {
      const c = line.trim().split(/\s+/);
      if (c.length > 9 && inodes.has(c[9]!)) ports.push(parseInt(c[1]!.split(':')[1]!, 16));
    }
  }
  return ports;
}

/** The PostgreSQL backends serving this process (but `probe`'s own), when the server runs on this machine. */
async function backends(probe: pg.Client): Promise<number[]> {
  const { rows } = await probe.query<{ pid: number }>(
    'SELECT pid FROM pg_stat_activity WHERE client_port = ANY($1::int[]) AND pid <> pg_backend_pid()',
    [localPorts()],
  );
  return rows.map((r) => r.pid);
}

interface Timed {
  shape: string;
  ms: number;
}

/** A store whose every statement is timed (from its send to its result) while `on.value`. */
function timing(inner: StoreAdapter, out: Timed[], on: { value: boolean }): StoreAdapter {
  const wrap = <K extends Kysely<DB>>(k: K): K => {
    const started = new WeakMap<QueryId, { t: number; sql: string }>();
    const plugin: KyselyPlugin = {
      transformQuery: ({ node, queryId }) => {
        if (on.value) started.set(queryId, { t: performance.now(), sql: k.getExecutor().compileQuery(node, queryId).sql });
        return node;
      },
      transformResult: async ({ result, queryId }) => {
        const s = started.get(queryId);
        if (s) out.push({ shape: shape(s.sql), ms: performance.now() - s.t });
        return result;
      },
    };
    return k.withPlugin(plugin) as K;
  };
  return wrapStore(inner, wrap);
}

interface Opened {
  name: string;
  store: StoreAdapter;
  engine: Engine;
  fresh: boolean;
  where: string;
  cycles: Array<{ wall: number; busy: number; main: number; cpu: number; server: number; statements: Timed[]; queued: number }>;
}

async function open(reuse: string): Promise<Opened> {
  const fresh = reuse === 'new';
  let store: StoreAdapter;
  let where: string;
  if (kind === 'sqlite') {
    where = fresh ? join(mkdtempSync(join(tmpdir(), 'baton-canary-steady-')), 'baton.sqlite') : reuse;
    store = openSqlite(where);
  } else {
    where = fresh ? (a.schema ?? `canary_steady_${process.pid}_${Date.now().toString(36)}`) : reuse;
    store = openPostgres({ url: a['pg-url']!, schema: where });
  }
  await store.migrate();
  const engine = new Engine({ store, nodeId: 'bench' });
  if (fresh) {
    await createHistoryPool(engine);
    for (const [i, name] of AGENTS.entries())
      await engine.agents.create(
        { name, max_parallel: 3, max_backlog: 1000, ...(i === KEYED_AGENT ? { keys: HISTORY_KEYS } : {}), ...historyFlowSettings(i) },
        'bench',
      );
  }
  const n = await count(store, 'executions');
  return {
    name: fresh ? `empty (${where})` : `${n.toLocaleString('en-US')} executions (${where})`,
    store,
    engine,
    fresh,
    where,
    cycles: [],
  };
}

async function count(store: StoreAdapter, table: 'executions', queued = false): Promise<number> {
  const r = await store.db
    .selectFrom(table)
    .select((eb) => eb.fn.countAll<number>().as('n'))
    .$if(queued, (q) => q.where('status', '=', 'queued'))
    .executeTakeFirstOrThrow();
  return Number(r.n);
}

async function atHead(store: StoreAdapter) {
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
}

async function activity(s: Opened, tasks: number, run: number) {
  for (let k = 0; k < tasks; k++)
    await s.engine.submit(AGENTS[k % AGENTS.length]!, { message: 'bench', ...historyKeyOf(k % AGENTS.length, k) }, 'bench');
  for (let k = 0; k < run; k++) {
    const [row] = await s.engine.claim(AGENTS[k % AGENTS.length]!, { owner: 'bench' });
    if (row) await s.engine.complete(row.id, row.lease_token!, { status: 'succeeded' }, 'bench');
  }
}

const median = (xs: number[]) => {
  const s = [...xs].sort((x, y) => x - y);
  return s.length ? s[Math.floor((s.length - 1) / 2)]! : NaN;
};
const f1 = (x: number) => x.toFixed(1);

function summarise(s: Opened) {
  const cs = s.cycles.slice(1);
  log(`\n${s.name}: ${cs.length} cycles`);
  log(`  wall ms ${cs.map((c) => Math.round(c.wall)).join(', ')} (median ${f1(median(cs.map((c) => c.wall)))})`);
  log(`  main thread busy ms ${cs.map((c) => Math.round(c.busy)).join(', ')} (median ${f1(median(cs.map((c) => c.busy)))})`);
  log(`  main thread CPU ms ${cs.map((c) => Math.round(c.main)).join(', ')} (median ${f1(median(cs.map((c) => c.main)))})`);
  log(`  process CPU ms ${cs.map((c) => Math.round(c.cpu)).join(', ')} (median ${f1(median(cs.map((c) => c.cpu)))})`);
  if (kind === 'postgres')
    log(`  PostgreSQL backends' CPU ms ${cs.map((c) => Math.round(c.server)).join(', ')} (median ${f1(median(cs.map((c) => c.server)))})`);
  log(`  queued rows ${cs.map((c) => c.queued).join(', ')}`);
  const per = new Map<string, number[]>();
  const calls = new Map<string, number>();
  for (const [i, c] of cs.entries()) {
    for (const t of c.statements) {
      const v = per.get(t.shape) ?? new Array<number>(cs.length).fill(0);
      v[i]! += t.ms;
      per.set(t.shape, v);
      calls.set(t.shape, (calls.get(t.shape) ?? 0) + 1);
    }
  }
  const totals = cs.map((c) => c.statements.reduce((x, t) => x + t.ms, 0));
  log(`  all statements, ms a cycle: median ${f1(median(totals))}`);
  const ranked = [...per].map(([k, v]) => ({ k, m: median(v), calls: calls.get(k)! / cs.length })).sort((x, y) => y.m - x.m);
  for (const r of ranked.slice(0, Number(a.top))) log(`  ${f1(r.m).padStart(7)} ms (${r.calls.toFixed(1)} calls)  ${r.k}`);
}

async function main() {
  const keepAlive = setInterval(() => {}, 1_000);
  if (a.reuse.length === 0) throw new Error('--reuse: at least one store (or `new`)');
  const stores: Opened[] = [];
  for (const r of a.reuse) stores.push(await open(r));
  const tasks = Number(a.activity);
  const probe = kind === 'postgres' ? new pg.Client({ connectionString: a['pg-url'] }) : undefined;
  await probe?.connect();
  try {
    // The same live work in every store: top the shallower queues up to the deepest one's.
    const queued = await Promise.all(stores.map((s) => count(s.store, 'executions', true)));
    const deepest = Math.max(...queued);
    for (const [i, s] of stores.entries()) if (queued[i]! < deepest) await activity(s, deepest - queued[i]!, 0);
    for (const s of stores) {
      await atHead(s.store);
      await runCanaryOnce({ store: s.store });
    }
    log(`load ${load()} at the start; ${kind}; stores: ${stores.map((s) => s.name).join(' | ')}`);
    for (let round = 0; round < Number(a.cycles) + 1; round++) {
      for (const s of stores) {
        await activity(s, tasks, Math.floor(tasks / 3));
        const statements: Timed[] = [];
        const pids = probe ? await backends(probe) : [];
        const server = () => pids.reduce((x, p) => x + ranNs(`/proc/${p}/schedstat`), 0);
        const on = { value: true };
        const s0 = server();
        const m0 = mainNs();
        const elu = performance.eventLoopUtilization();
        const cpu = process.cpuUsage();
        const t = performance.now();
        const r = await runCanaryOnce({ store: timing(s.store, statements, on) });
        const wall = performance.now() - t;
        const used = process.cpuUsage(cpu);
        const busy = performance.eventLoopUtilization(elu).active;
        const main = (mainNs() - m0) / 1e6;
        const srv = (server() - s0) / 1e6;
        on.value = false;
        const q = await count(s.store, 'executions', true);
        s.cycles.push({ wall, busy, main, cpu: (used.user + used.system) / 1000, server: srv, statements, queued: q });
        log(
          `round ${round} ${s.name.padEnd(40)} wall ${Math.round(wall)} ms, busy ${Math.round(busy)} ms, main CPU ${Math.round(main)} ms, ` +
            `process CPU ${Math.round((used.user + used.system) / 1000)} ms${probe ? `, backends' CPU ${Math.round(srv)} ms (${pids.length})` : ''}, ` +
            `events ${r.events?.read ?? '-'}${r.events?.caught_up ? '' : ' (behind)'}, open ${r.open}, queued ${q}, load ${load()}`,
        );
      }
    }
    for (const s of stores) summarise(s);
    log(`\nload ${load()} at the end`);
  } finally {
    await probe?.end();
    for (const s of stores) {
      s.engine.close();
      await s.store.close();
      if (s.fresh && !a.keep) {
        if (kind === 'sqlite') rmSync(dirname(s.where), { recursive: true, force: true });
        else {
          const c = new pg.Client({ connectionString: a['pg-url'] });
          await c.connect();
          await c.query(`DROP SCHEMA IF EXISTS ${s.where} CASCADE`);
          await c.end();
        }
      } else if (s.fresh) log(`kept: ${s.where}`);
    }
    clearInterval(keepAlive);
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
