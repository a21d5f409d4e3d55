import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { sql } from 'kysely';
import pg from 'pg';
import { describe } from 'vitest';
import { BatonError } from '../../src/domain/errors.ts';
import { Engine } from '../../src/engine/engine.ts';
import type { StoreAdapter } from '../../src/store/adapter.ts';
import { openPostgres } from '../../src/store/postgres.ts';
import { openSqlite } from '../../src/store/sqlite.ts';
import { manualClock, type ManualClock } from './clock.ts';
import { onEveryPath } from './differential-paths.ts';
import { DROPPED, Naming } from './id-naming.ts';
import { LEASE_S, type AgentSpec, type Op, type PoolSpec, type Scenario, type Target } from './differential-scenarios.ts';
import { PG_URL, STORE_KIND } from './store.ts';

export { scenarioArb, type Scenario } from './differential-scenarios.ts';

// The differential harness (test/engine/differential.test.ts): one sequence of engine operations run
// three ways — SQLite, PostgreSQL with its fast paths (the lone claim, submit and completion
// statements) and PostgreSQL with them off — on one manual clock. Every answer, every event and,
// at the end, every row must be equal once ids and lease tokens are named by first appearance.

/** Capability-named skip: tests that need SQLite and PostgreSQL at once (the postgres project has both). */
export const describeEveryStore = STORE_KIND === 'postgres' ? describe : describe.skip;

export type PathName = 'sqlite' | 'pg-fast' | 'pg-slow';
export const PATHS: readonly PathName[] = ['sqlite', 'pg-fast', 'pg-slow'];

export interface Paths {
  stores: Map<PathName, StoreAdapter>;
  close(): Promise<void>;
}

/** A migrated store per path: a new SQLite file and two new PostgreSQL schemas, dropped by close(). */
export async function openPaths(): Promise<Paths> {
  const dir = mkdtempSync(join(tmpdir(), 'baton-diff-'));
  const tag = `t_diff_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 6)}`;
  const schemas = [`${tag}_fast`, `${tag}_slow`];
  const stores = new Map<PathName, StoreAdapter>([
    ['sqlite', openSqlite(join(dir, 'baton.sqlite'))],
    ['pg-fast', openPostgres({ url: PG_URL, schema: schemas[0], poolMax: 4 })],
    ['pg-slow', openPostgres({ url: PG_URL, schema: schemas[1], poolMax: 4, fastPaths: false })],
  ]);
  for (const store of stores.values()) await store.migrate();
  return {
    stores,
    async close() {
      for (const store of stores.values()) await store.close();
      const client = new pg.Client({ connectionString: PG_URL });
      await client.connect();
      for (const s of schemas) await client.query(`DROP SCHEMA IF EXISTS ${s} CASCADE`);
      await client.end();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Tables that hold what a run did; the rest (migrations, singletons) are left as migrated. */
const KEPT = new Set(['schema_migrations', 'baton_migrations', 'retention_state', 'canary_state', 'leader_leases']);

async function tablesOf(store: StoreAdapter): Promise<string[]> {
  const { rows } =
    store.kind === 'postgres'
      ? await sql<{ name: string }>`SELECT tablename AS name FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1`.execute(
          store.db,
        )
      : await sql<{ name: string }>`SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY 1`.execute(
          store.db,
        );
  return rows.map((r) => r.name).filter((n) => !KEPT.has(n) && !n.includes('migration'));
}

/** Empty every table a run writes, history included (so each run starts from a migrated store). */
async function resetStore(store: StoreAdapter, tables: readonly string[]): Promise<void> {
  if (store.kind === 'postgres') {
    // Replica role: triggers (the history tables' append-only guard, foreign keys, counters)
    // stand aside. DELETE, not TRUNCATE: the tables are small, and TRUNCATE makes new files.
    await store.transaction(async (tx) => {
      await sql`SET LOCAL session_replication_role = replica`.execute(tx);
      for (const t of tables) await sql`DELETE FROM ${sql.table(t)}`.execute(tx);
    });
    return;
  }
  await store.transaction(async (tx) => {
    await sql`UPDATE retention_state SET pruning = 1`.execute(tx);
    await sql`PRAGMA defer_foreign_keys = ON`.execute(tx);
    for (const t of tables) await sql`DELETE FROM ${sql.table(t)}`.execute(tx);
    await sql`UPDATE retention_state SET pruning = 0`.execute(tx);
  });
}

// ── running a scenario ──────────────────────────────────────────────────────

export const CANCEL_GRACE_MS = 15_000;
export const BACKLOG_EXPIRY_MS = 90_000;

interface PathRun {
  name: PathName;
  store: StoreAdapter;
  engine: Engine;
  naming: Naming;
  /** Lease tokens granted, by execution name, in order. */
  tokens: Map<string, string[]>;
  /** Subscription ids in creation order. */
  subs: string[];
  lastEvent: number;
}

/** What the paths said at one step, by path. */
export type Said = Record<PathName, unknown>;

/** The paths disagreed: at operation `at` (or, with `at` null, in the rows at the end). */
export class Divergence extends Error {
  constructor(
    readonly at: number | null,
    readonly what: string,
    readonly said: Said,
    readonly scenario: Scenario,
  ) {
    super(describeDivergence(at, what, said, scenario));
    this.name = 'Divergence';
  }

  /** The one path that disagrees with the other two, if one does. */
  get odd(): PathName | undefined {
    const [a, b, c] = PATHS.map((p) => this.said[p]);
    if (isDeepStrictEqual(a, b)) return isDeepStrictEqual(a, c) ? undefined : 'pg-slow';
    if (isDeepStrictEqual(a, c)) return 'pg-fast';
    if (isDeepStrictEqual(b, c)) return 'sqlite';
    return undefined;
  }
}

const show = (v: unknown) => JSON.stringify(v, null, 1).replace(/\n\s*/g, ' ');

function describeDivergence(at: number | null, what: string, said: Said, scenario: Scenario): string {
  const where = at === null ? `in the rows at the end (${what})` : `at operation ${at}: ${show(scenario.ops[at])} (${what})`;
  const lines = [`the paths disagree ${where}`];
  for (const p of PATHS) lines.push(`  ${p.padEnd(7)}: ${show(said[p])}`);
  lines.push('agents:');
  scenario.agents.forEach((a, i) => lines.push(`  ${i}: ${show(a)}`));
  lines.push('operations:');
  const upTo = at ?? scenario.ops.length - 1;
  scenario.ops.slice(0, upTo + 1).forEach((o, i) => lines.push(`  ${i}: ${show(o)}`));
  return lines.join('\n');
}

const agentName = (prefix: string, agents: number, i: number) => `${prefix}${i % agents}`;
/** The scenario's i-th pool (modulo their number); undefined when it has none. */
const poolName = (prefix: string, sc: Scenario, i: number) => {
  const n = sc.pools?.length ?? 0;
  return n === 0 ? undefined : `${prefix}p${i % n}`;
};
/** The names of the pools at these indexes, each once. */
const poolNames = (prefix: string, sc: Scenario, ix: readonly number[]) => [
  ...new Set(ix.map((i) => poolName(prefix, sc, i)).filter((n) => n !== undefined)),
];

const createPool = (e: Engine, name: string, p: PoolSpec, actor: string) =>
  e.pools.create({ name, max_parallel: p.max_parallel, throttle: p.throttle, budget: p.budget }, actor);

async function answer(fn: () => Promise<unknown>): Promise<unknown> {
  try {
    return { ok: await fn() };
  } catch (err) {
    if (err instanceof BatonError) return { error: err.code };
    return { crash: err instanceof Error ? err.message : String(err) };
  }
}

/** Statuses by execution name, from the events seen (equal on every path, or the run has stopped). */
type Statuses = Map<string, string>;

function pick(statuses: Statuses, t: Target): string | undefined {
  const all = [...statuses.keys()].sort(byName);
  const live = all.filter((n) => statuses.get(n) === 'queued' || statuses.get(n) === 'running');
  const running = live.filter((n) => statuses.get(n) === 'running');
  const pool = t.pool === 'running' ? running : t.pool === 'live' && live.length > 0 ? live : all;
  return pool.length === 0 ? undefined : pool[t.i % pool.length];
}

async function createAgent(e: Engine, name: string, a: AgentSpec, actor: string, pools: string[] = []) {
  const row = await e.agents.create(
    {
      name,
      max_parallel: a.max_parallel,
      max_backlog: a.max_backlog,
      max_redeliveries: a.max_redeliveries,
      timeout_seconds: a.timeout_seconds,
      lease_ttl_seconds: LEASE_S,
      delivery: a.push ? 'push' : 'pull',
      push_url: a.push ? 'http://127.0.0.1:42999/push' : null,
      retry_policy: a.retry_policy,
      breaker: a.breaker,
      budget: a.budget,
      key_max_parallel: a.key_cap ?? null,
      key_throttle: a.key_throttle ?? null,
      throttle: a.throttle ?? null,
      pools,
    },
    actor,
  );
  return a.paused ? (await e.agents.pause(name, 'at creation', actor)).agent : row;
}

/** One operation on one path: its answer, as returned (ids not yet named). */
async function perform(r: PathRun, sc: Scenario, o: Op, clock: ManualClock, statuses: Statuses, prefix: string): Promise<unknown> {
  const e = r.engine;
  const name = (i: number) => agentName(prefix, sc.agents.length, i);
  const poolsOf = (a: AgentSpec) => poolNames(prefix, sc, a.pools ?? []);
  const exec = (t: Target) => {
    const n = pick(statuses, t);
    return n === undefined ? undefined : r.naming.real(n);
  };
  const tokenOf = (id: string, i: number) => {
    const granted = r.tokens.get(r.naming.name(id)) ?? [];
    return granted.length === 0 ? 'ls_never_granted' : granted[i % granted.length]!;
  };
  const none = { none: true };
  switch (o.k) {
    case 'submit':
      return answer(() =>
        e.submit(
          name(o.agent),
          {
            message: 'task',
            priority: o.priority,
            run_after: o.runAfter === null ? null : clock() + o.runAfter,
            idempotency_key: o.key === null ? null : `key-${o.key}`,
            key: o.flowKey == null ? null : `fk-${o.flowKey}`,
          },
          'diff',
        ),
      );
    case 'submitBatch':
      return answer(() =>
        e.submitMany(
          name(o.agent),
          o.keys.map((k) => ({ message: `batch ${k}`, key: k % 2 === 0 ? `fk-${k}` : null, idem: { key: `batch-${k}`, hash: `h${k}` } })),
          'diff',
        ),
      );
    case 'claim': {
      const got = await answer(() => e.claim(name(o.agent), { owner: 'worker', max: o.max, delivery: o.push ? 'push' : 'pull' }));
      const rows = (got as { ok?: Array<{ id: string; lease_token: string | null }> }).ok ?? [];
      for (const row of rows) {
        const n = r.naming.name(row.id);
        r.tokens.set(n, [...(r.tokens.get(n) ?? []), row.lease_token!]);
      }
      return got;
    }
    case 'heartbeat': {
      const id = exec(o.ex);
      return id === undefined ? none : answer(() => e.heartbeat(id, tokenOf(id, o.token)));
    }
    case 'complete': {
      const id = exec(o.ex);
      if (id === undefined) return none;
      const error = o.status === 'failed' ? { code: 'boom', message: 'it broke' } : null;
      const usage = o.cost === null ? undefined : { cost_usd: o.cost, total_tokens: 10 };
      return answer(() => e.complete(id, tokenOf(id, o.token), { status: o.status, error, usage, result: { done: true } }, 'worker'));
    }
    case 'release': {
      const id = exec(o.ex);
      return id === undefined ? none : answer(() => e.release(id, tokenOf(id, o.token), 'worker'));
    }
    case 'cancel': {
      const id = exec(o.ex);
      return id === undefined ? none : answer(() => e.cancel(id, 'user'));
    }
    case 'retry': {
      const id = exec(o.ex);
      return id === undefined ? none : answer(() => e.retryFailed(id, 'user'));
    }
    case 'advance':
      clock.advance(o.ms);
      return none;
    case 'reap':
      return answer(async () => {
        const reaped = await e.reapOnce();
        return reaped.map((x) => r.naming.normalise(x)).sort((a, b) => show(a).localeCompare(show(b)));
      });
    case 'pause':
      return answer(() => e.agents.pause(name(o.agent), 'by hand', 'operator'));
    case 'resume':
      return answer(() => e.agents.resume(name(o.agent), 'operator'));
    case 'closeBreaker':
      return answer(() => e.agents.closeBreaker(name(o.agent), 'operator'));
    case 'subscribe': {
      const got = await answer(() =>
        e.subscriptions.create(
          { source_agent: name(o.source), target_agent: name(o.target), on: o.on, message: 'follow up', enabled: o.enabled },
          'operator',
        ),
      );
      const id = (got as { ok?: { id: string } }).ok?.id;
      if (id !== undefined) r.subs.push(id);
      return got;
    }
    case 'toggleSubscription': {
      const id = r.subs[o.sub % Math.max(1, r.subs.length)];
      return id === undefined ? none : answer(() => e.subscriptions.update(id, { enabled: o.enabled }, 'operator'));
    }
    case 'group':
      return answer(() =>
        e.groups.create(
          {
            members: o.members.map((m, i) => ({ agent: name(m), message: `member ${i}` })),
            policy: o.policy,
            quorum: o.policy === 'quorum' ? 1 : null,
            join: o.join === null ? null : { agent: name(o.join), message: 'join {{group.status}}' },
          },
          'operator',
        ),
      );
    case 'edit':
      return answer(() => e.agents.update(name(o.agent), o.patch, 'operator'));
    case 'delete':
      // And made again at once, as configured: the new agent inherits the old one's running work.
      return answer(async () => [
        await e.agents.delete(name(o.agent), 'operator'),
        await createAgent(
          e,
          name(o.agent),
          sc.agents[o.agent % sc.agents.length]!,
          'operator',
          poolsOf(sc.agents[o.agent % sc.agents.length]!),
        ),
      ]);
    case 'join':
      return answer(() => e.agents.update(name(o.agent), { pools: poolNames(prefix, sc, o.pools) }, 'operator'));
    case 'editPool': {
      const pool = poolName(prefix, sc, o.pool);
      return pool === undefined ? none : answer(() => e.pools.update(pool, o.patch, 'operator'));
    }
    case 'deletePool': {
      // Refused while an agent draws from it; when it goes, it is made again at once, as configured.
      const pool = poolName(prefix, sc, o.pool);
      if (pool === undefined) return none;
      return answer(async () => [
        await e.pools.delete(pool, 'operator'),
        await createPool(e, pool, sc.pools![o.pool % sc.pools!.length]!, 'operator'),
      ]);
    }
    case 'why': {
      const id = exec(o.ex);
      return id === undefined ? none : answer(async () => (await e.getExecution(id)).waiting);
    }
  }
}

/** The events a path wrote since the last read, in order. */
async function newEvents(r: PathRun): Promise<unknown[]> {
  const rows = await r.store.db.selectFrom('execution_events').selectAll().where('id', '>', r.lastEvent).orderBy('id').execute();
  if (rows.length > 0) r.lastEvent = Number(rows.at(-1)!.id);
  return rows;
}

/** E2 before E10. */
const byName = (a: string, b: string) => a.localeCompare(b, 'en', { numeric: true });

/** Every row a path holds at the end, by table, named: history in its order, the rest sorted. */
async function dump(r: PathRun, tables: readonly string[]): Promise<Record<string, unknown[]>> {
  const out: Record<string, unknown[]> = {};
  for (const t of tables) {
    const rows = (await sql<Record<string, unknown>>`SELECT * FROM ${sql.table(t)} ORDER BY 1`.execute(r.store.db)).rows;
    const serial = rows.length > 0 && typeof rows[0]!.id === 'number';
    const named = rows.map((row) => r.naming.normalise(row, serial ? DROPPED : undefined));
    out[t] = serial ? named : named.sort((a, b) => show(a).localeCompare(show(b)));
  }
  return out;
}

export interface RunOptions {
  /** Agent names start with this (the planted test's hold keys on it). Default `a`. */
  prefix?: string;
}

/** Runs `sc` on every path; throws a Divergence where they differ, else resolves with the answers (as named). */
export async function runScenario(paths: Paths, sc: Scenario, opts: RunOptions = {}): Promise<unknown[]> {
  const prefix = opts.prefix ?? 'a';
  const clock = manualClock();
  const runs: PathRun[] = [];
  const tables = await tablesOf(paths.stores.get('sqlite')!);
  // The paths are separate stores: emptied at once.
  await Promise.all(
    PATHS.map(async (name) => {
      const store = paths.stores.get(name)!;
      await resetStore(store, store.kind === 'postgres' ? await tablesOf(store) : tables);
    }),
  );
  for (const name of PATHS) {
    const store = paths.stores.get(name)!;
    const engine = new Engine({
      store,
      clock,
      nodeId: 'diff',
      cancelGraceMs: CANCEL_GRACE_MS,
      backlogExpiryMs: BACKLOG_EXPIRY_MS,
      alertSinks: ['webhook'],
    });
    runs.push({ name, store, engine, naming: new Naming(), tokens: new Map(), subs: [], lastEvent: 0 });
  }
  const statuses: Statuses = new Map();
  const answers: unknown[] = [];
  const agree = (at: number | null, what: string, said: unknown[]) => {
    if (said.every((s) => isDeepStrictEqual(s, said[0]))) return;
    throw new Divergence(at, what, Object.fromEntries(PATHS.map((p, i) => [p, said[i]])) as Said, sc);
  };
  try {
    // The pools, then the agents, as the scenario configures them.
    for (const [i, p] of (sc.pools ?? []).entries())
      await onEveryPath(runs, true, (r) => createPool(r.engine, poolName(prefix, sc, i)!, p, 'setup'));
    for (const [i, a] of sc.agents.entries()) {
      const pools = poolNames(prefix, sc, a.pools ?? []);
      await onEveryPath(runs, true, (r) => createAgent(r.engine, agentName(prefix, sc.agents.length, i), a, 'setup', pools));
    }
    for (const [at, o] of sc.ops.entries()) {
      clock.advance(1); // distinct times, so FIFO order never falls to the ids
      const said: unknown[] = [];
      const events: unknown[][] = [];
      const done = await onEveryPath(runs, o.k !== 'advance', async (r) => {
        const got = await perform(r, sc, o, clock, statuses, prefix);
        return { got, written: await newEvents(r) };
      });
      for (const [i, r] of runs.entries()) {
        const { got, written } = done[i]!;
        r.naming.nameNewExecutions([got, written]);
        said.push(r.naming.normalise(got));
        // One operation's events in each execution's order; between executions, as named (a
        // statement without ORDER BY, such as an agent's deletion reading its running rows, may
        // return them in another order on another store).
        const named = r.naming.normalise(written, DROPPED) as Array<{ execution_id: string }>;
        events.push(named.sort((a, b) => byName(a.execution_id, b.execution_id)));
      }
      agree(at, 'answer', said);
      agree(at, 'events', events);
      answers.push(said[0]);
      for (const e of events[0]! as Array<{ execution_id: string; to_status: string }>) statuses.set(e.execution_id, e.to_status);
    }
    // The event log was compared operation by operation.
    const dumps = await Promise.all(
      runs.map((r) =>
        dump(
          r,
          tables.filter((t) => t !== 'execution_events'),
        ),
      ),
    );
    for (const t of tables) {
      const rows = dumps.map((d) => d[t] ?? []);
      if (rows.every((x) => isDeepStrictEqual(x, rows[0]))) continue;
      // The first row that differs, with its neighbours on the other paths.
      const n = Math.max(...rows.map((x) => x.length));
      for (let i = 0; i < n; i++)
        agree(
          null,
          `${t} row ${i} of ${rows.map((x) => x.length).join('/')}`,
          rows.map((x) => x[i] ?? null),
        );
    }
    return answers;
  } finally {
    for (const r of runs) r.engine.close();
  }
}
