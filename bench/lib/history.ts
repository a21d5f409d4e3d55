/**
 * The `history` scenario: does Baton stay fast as its history grows?
 *
 * One database per store (SQLite file under $TMPDIR/bench-history-*, or a PostgreSQL schema
 * bench_history_*), 100 agents `hist-000`…`hist-099` created through the engine. Then:
 *   1. empty store: start `baton up` (its own process, port 7600+), run the probes, stop it;
 *   2. fill N past executions through the fast path (bench/lib/history-fill.ts), ANALYZE,
 *      measure bytes on disk per execution;
 *   3. at N: start `baton up` again, the same probes, stop it;
 *   4. prune: start `baton up` with BATON_RETENTION_DAYS=17 (and BATON_PRUNE_INTERVAL_MS=1000)
 *      on the history spread over 35 days, so the retention pruner removes about half of it;
 *      meanwhile /healthz is pinged every ~10 ms, one submit→claim→complete runs every ~100 ms
 *      (--history-prune-probe-gap-ms), and a claimed task is heartbeated every 10 s (its lease
 *      must not lapse). Prune rate from the pruner's record (retention_state) and a count at the end. If no pruner runs (no pass recorded
 *      within --history-prune-detect-s), the scenario prints "pruner not available".
 *
 * Probes, each over a fixed number of sequential repetitions (latency from request to the
 * parsed answer): submit → claim → complete on a history agent; agents list; executions list
 * (first page; agent + status=failed over 10 agents given 50 failures each first; a cursor page
 * 30 days deep, or on a younger store past its 50th newest rows: full pages in every state); one execution with its
 * timeline (at N, 100 spread over the history; and the probe's own, as on the empty store); the dashboard overview (what web/src/pages/Overview.tsx loads: agents, the 8
 * latest failures, canary status — in parallel, as the page does); a metrics scrape; a canary
 * cycle (POST /v1/canary/run); one full check over all history (POST /v1/canary/run with
 * {full: true}); 1,000 schedules due at one instant (fire lag, measured by
 * bench/lib/triggers-fire-lag.ts, own `baton up`). During the canary cycles, the full check and
 * the metrics scrapes a concurrent loop pings /healthz every ~10 ms and keeps the worst latency.
 *
 * Targets: every probe at N within 1.5× of its empty-store figure (p50); a canary cycle ≤ 1 s
 * at N; worst /healthz ≤ 100 ms throughout; pruning ≥ 20,000 executions/s.
 */
import { mkdtempSync, rmSync, statSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import Database from 'better-sqlite3';
import pg from 'pg';
import type { StoreKind } from '../../src/store/adapter.ts';
import { openPostgres } from '../../src/store/postgres.ts';
import { openSqlite } from '../../src/store/sqlite.ts';
import { Engine } from '../../src/engine/engine.ts';
import { fillHistory, type FillAgent, type FillResult } from './history-fill.ts';
import { createHistoryPool, HISTORY_KEYS, historyFlowSettings, KEYED_AGENT } from './history-flow.ts';
import { cpuMeter, pgBackendTicks, waitForQuiet } from './cpu.ts';
import { startServer, type RunningServer } from './server.ts';
import { sleep, summarize, type LatencySummary } from './stats.ts';
import type { BenchDb } from './stores.ts';
import { runFireLag } from './triggers-fire-lag.ts';

export interface HistoryConfig {
  store: StoreKind;
  pgUrl: string;
  n: number;
  days: number;
  retentionDays: number;
  /** Ports basePort … basePort + 9. */
  basePort: number;
  reps: number;
  canaryReps: number;
  metricsReps: number;
  schedules: number;
  pruneDetectS: number;
  pruneMaxS: number;
  /** Seconds of the submit → claim probe against an idle `baton up` (retention off) just before the prune: its baseline. */
  pruneIdleS: number;
  /**
   * Pause between two submit → claim → complete probes of the prune phase (and of its idle
   * baseline), ms. At the default 100 a sweep of ~12 s (PostgreSQL) yields ~90 samples, so its p99
   * is about the slowest one; 30 (~25 probes a second) gives ~300 and loads the store more.
   */
  pruneProbeGapMs: number;
  batch: number;
  /** Skip the prune phase. */
  noPrune: boolean;
  /** Skip the probes (empty store and at N): fill, then prune only. */
  pruneOnly: boolean;
  log: (line: string) => void;
}

export const HISTORY_DEFAULTS: Omit<HistoryConfig, 'store' | 'pgUrl' | 'log'> = {
  n: 1_000_000,
  days: 35,
  retentionDays: 17,
  basePort: 7600,
  reps: 100,
  canaryReps: 5,
  metricsReps: 20,
  schedules: 1000,
  pruneDetectS: 60,
  pruneMaxS: 600,
  pruneIdleS: 15,
  pruneProbeGapMs: 100,
  batch: 10_000,
  noPrune: false,
  pruneOnly: false,
};

export const PROBES = [
  'healthz',
  'submit_claim_complete',
  'agents_list',
  'executions_first_page',
  'executions_agent_status',
  'executions_deep_cursor',
  'execution_detail',
  'execution_detail_recent',
  'dashboard_overview',
  'metrics_scrape',
  'canary_cycle',
] as const;
export type ProbeName = (typeof PROBES)[number];

export const PROBE_LABEL: Record<ProbeName, string> = {
  healthz: 'GET /healthz (reference)',
  submit_claim_complete: 'submit → claim → complete',
  agents_list: 'agents list',
  executions_first_page: 'executions list, first page',
  executions_agent_status: 'executions list, agent + status=failed',
  executions_deep_cursor: 'executions list, cursor page 30 days deep',
  execution_detail: 'one execution with its timeline',
  execution_detail_recent: 'one execution with its timeline, made by the probe',
  dashboard_overview: 'dashboard overview (agents, 8 failures, canary)',
  metrics_scrape: 'GET /metrics',
  canary_cycle: 'canary cycle (POST /v1/canary/run)',
};

export interface StateResult {
  /** Executions in the store when the probes ran. */
  executions: number;
  probes: Partial<Record<ProbeName, LatencySummary>>;
  /**
   * CPU milliseconds per repetition spent by the server process (and, on PostgreSQL, the
   * backends serving it) during each probe: steadier than latency on a shared machine.
   */
  cpu_ms_per_op: Partial<Record<ProbeName, number | null>>;
  /** Machine busy % (all cores) during each probe: other jobs show here. */
  machine_busy_pct: Partial<Record<ProbeName, number | null>>;
  busy_before_pct: number | null;
  /** submit → claim (the claim returned the task), within the submit_claim_complete probe. */
  submit_to_claim: LatencySummary;
  /** Worst /healthz latency while each of these ran (ms), and pings sent. */
  healthz_worst: { startup: number; canary: number; metrics: number; canary_full?: number };
  healthz_pings: { startup: number; canary: number; metrics: number; canary_full?: number };
  /** One full check over all history (`baton canary run --full`): how long, and the events it read. */
  canary_full?: { ms: number; events_read: number } | { error: string };
  /** The first canary cycle this probe run asked for, ms (the others are in probes.canary_cycle). */
  canary_first_ms: number;
  canary_first_report?: unknown;
  /** When the first cycle had not read the whole event log: the cycles it took to catch up. */
  canary_catch_up?: { cycles: number; seconds: number; events_read: number; worst_cycle_ms: number; caught_up: boolean };
  fire_lag?: { schedules: number; fired: number; p50: number; p99: number; drain_ms: number; cpu_s: number | null } | { error: string };
  errors: string[];
}

export interface PruneResult {
  available: boolean;
  note?: string;
  eligible?: number;
  removed?: number;
  seconds?: number;
  /** Executions removed per second: from `baton up` reporting it is up to the count of old rows reaching 0 (polled every second). */
  rate_per_s?: number;
  /** The pruner's own figure: retention_state.last_executions / last_duration_ms of its sweep. */
  own_rate_per_s?: number;
  first_removal_after_s?: number;
  /** retention_state after each sweep that removed executions. */
  sweeps?: Array<Record<string, unknown>>;
  /** [ms since up, old rows left]. */
  progress?: Array<[number, number]>;
  retention_state?: Record<string, unknown>;
  /** /healthz pings that started while a sweep ran. */
  healthz_worst_ms?: number;
  healthz_pings?: number;
  healthz_over_100ms?: number;
  /** Every ping of the phase, from the server's start (its first requests are cold) to the end. */
  healthz_phase_worst_ms?: number;
  healthz_phase_pings?: number;
  /**
   * Each ping over SLOW_PING_MS (50) in the phase: whether a sweep ran, when (from the server's start and from
   * the end of the last sweep), and the longest stall of the bench's own event loop that overlapped it (0: none over 50 ms).
   */
  healthz_slow_pings?: Array<{
    at: number;
    ms: number;
    sweeping: boolean;
    since_up_ms: number;
    since_sweep_end_ms: number;
    bench_stall_ms: number;
  }>;
  /** Every ping after the last sweep ended (SQLite's vacuum steps run then) to the end of the phase. */
  healthz_after_sweep_worst_ms?: number;
  /** The server's longest event-loop delay from the first removal seen to the last (prom-client's nodejs_eventloop_lag_max_seconds). */
  server_loop_max_ms?: number;
  /** This process's longest event-loop delay over the phase, and its gaps over 50 ms. */
  bench_loop_max_ms?: number;
  bench_loop_stalls?: number;
  submit_to_claim?: LatencySummary;
  /** The same probe, only the samples that started while a sweep ran (retention_state's started → completed). */
  submit_to_claim_sweeping?: LatencySummary;
  /** The same probe (and /healthz pings) for --history-prune-idle-s against `baton up` with retention off, just before. */
  idle_submit_to_claim?: LatencySummary;
  idle_healthz_worst_ms?: number;
  /** submit → claim while sweeping / idle: p50 and p99 ratios ("W2 latency at most doubles"). */
  w2_ratio?: { p50: number; p99: number };
  submit_errors?: number;
  remaining?: number;
  /** A task claimed before the prune and heartbeated every 10 s through it; reaper lapses of any running row meanwhile. */
  held_lease?: {
    claimed: boolean;
    heartbeats: number;
    heartbeat_max_ms?: number;
    /** Heartbeats or the final complete refused (409): the lease had lapsed. */
    lost: number;
    errors: number;
    reaper_lapses: number;
  };
}

export interface HistoryResult {
  store: StoreKind;
  n: number;
  fill?: FillResult;
  bytes?: { empty: number; full: number; per_execution: number; per_execution_net: number; how: string };
  empty?: StateResult;
  full?: StateResult;
  prune?: PruneResult;
  error?: string;
}

// ── database ────────────────────────────────────────────────────────────────

interface HistoryDb extends BenchDb {
  file?: string;
}

const liveDbs = new Set<HistoryDb>();
/** Last-resort cleanup (after an error or Ctrl-C): the scenario's databases. */
export async function cleanupHistoryDbs(): Promise<void> {
  for (const db of [...liveDbs]) await db.cleanup().catch(() => {});
}

function historyDb(kind: StoreKind, pgUrl: string): HistoryDb {
  const db = makeHistoryDb(kind, pgUrl);
  const cleanup = db.cleanup;
  db.cleanup = async () => {
    liveDbs.delete(db);
    await cleanup();
  };
  liveDbs.add(db);
  return db;
}

function makeHistoryDb(kind: StoreKind, pgUrl: string): HistoryDb {
  const dataDir = mkdtempSync(join(tmpdir(), `bench-history-${kind}-`));
  if (kind === 'sqlite') {
    const file = join(dataDir, 'baton.sqlite');
    return {
      kind,
      dataDir,
      file,
      env: { BATON_DATA_DIR: dataDir },
      async open() {
        const s = openSqlite(file);
        await s.migrate();
        return s;
      },
      async cleanup() {
        rmSync(dataDir, { recursive: true, force: true });
      },
    };
  }
  const schema = `bench_history_${process.pid}_${Date.now().toString(36)}`;
  return {
    kind,
    dataDir,
    url: pgUrl,
    schema,
    env: { BATON_DATA_DIR: dataDir, BATON_DATABASE_URL: pgUrl, BATON_PG_SCHEMA: schema },
    async open(opts = {}) {
      const s = openPostgres({ url: pgUrl, schema, poolMax: opts.poolMax });
      await s.migrate();
      return s;
    },
    async cleanup() {
      const c = new pg.Client({ connectionString: pgUrl });
      await c.connect();
      try {
        await c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      } finally {
        await c.end();
      }
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** Small read-only queries from the bench process while `baton up` serves the database. */
interface Peek {
  one<T = Record<string, unknown>>(sqlText: string, params?: unknown[]): Promise<T | undefined>;
  close(): Promise<void>;
}
async function peek(db: HistoryDb): Promise<Peek> {
  if (db.kind === 'sqlite') {
    const d = new Database(db.file!, { readonly: true, fileMustExist: true });
    d.pragma('busy_timeout = 5000');
    return {
      async one(text, params = []) {
        return d.prepare(text.replace(/\$\d+/g, '?')).get(...params) as never;
      },
      async close() {
        d.close();
      },
    };
  }
  const c = new pg.Client({ connectionString: db.url, options: `-c search_path=${db.schema}` });
  await c.connect();
  return {
    async one(text, params = []) {
      return (await c.query(text, params)).rows[0];
    },
    async close() {
      await c.end();
    },
  };
}

async function countExecutions(db: HistoryDb): Promise<number> {
  const p = await peek(db);
  try {
    return Number((await p.one<{ n: number }>('SELECT count(*) AS n FROM executions'))!.n);
  } finally {
    await p.close();
  }
}

async function bytesOnDisk(db: HistoryDb): Promise<number> {
  if (db.kind === 'sqlite') {
    const d = new Database(db.file!);
    try {
      d.pragma('wal_checkpoint(TRUNCATE)');
    } finally {
      d.close();
    }
    const wal = `${db.file}-wal`;
    return statSync(db.file!).size + (existsSync(wal) ? statSync(wal).size : 0);
  }
  const c = new pg.Client({ connectionString: db.url });
  await c.connect();
  try {
    const r = await c.query(
      `SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint AS b FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind IN ('r', 'm')`,
      [db.schema],
    );
    return Number(r.rows[0].b);
  } finally {
    await c.end();
  }
}

// ── HTTP ────────────────────────────────────────────────────────────────────

class Http {
  constructor(
    readonly url: string,
    readonly key: string,
  ) {}
  async call(method: string, path: string, body?: unknown, timeoutMs = 180_000): Promise<{ status: number; body: any }> {
    const headers: Record<string, string> = { authorization: `Bearer ${this.key}` };
    if (body !== undefined) headers['content-type'] = 'application/json';
    const res = await fetch(this.url + path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(timeoutMs),
    });
    const text = await res.text();
    if (!res.ok) throw new Error(`${method} ${path} → ${res.status} ${text.slice(0, 300)}`);
    const type = res.headers.get('content-type') ?? '';
    return { status: res.status, body: type.includes('json') && text ? JSON.parse(text) : text };
  }
}

/** Pings /healthz every `everyMs` until stopped; keeps every latency. */
function healthzLoop(url: string, everyMs = 10) {
  /** [epoch ms at the ping's start, its latency]. */
  const samples: Array<[number, number]> = [];
  let running = true;
  const done = (async () => {
    while (running) {
      const at = Date.now();
      const t0 = performance.now();
      try {
        const r = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(30_000) });
        await r.text();
      } catch {
        /* counted by its latency */
      }
      const dt = performance.now() - t0;
      samples.push([at, dt]);
      if (dt < everyMs) await sleep(everyMs - dt);
    }
  })();
  return {
    async stop() {
      running = false;
      await done;
      return { ...worstOf(samples.map((x) => x[1])), samples };
    },
  };
}

/**
 * This process's own event loop, watched while a phase runs: a slow /healthz ping may be the
 * bench (which runs the pings, the probe and the polls on one event loop) rather than the server.
 * Keeps every gap of a 10 ms timer over 50 ms, as [epoch ms when it ended, gap ms].
 */
function stallWatch() {
  const stalls: Array<[number, number]> = [];
  const delay = monitorEventLoopDelay({ resolution: 10 });
  delay.enable();
  let last = performance.now();
  const timer = setInterval(() => {
    const now = performance.now();
    if (now - last > 50) stalls.push([Date.now(), Math.round(now - last)]);
    last = now;
  }, 10);
  return {
    stop() {
      clearInterval(timer);
      delay.disable();
      return { stalls, max_ms: Math.round(delay.max / 1e5) / 10 };
    },
  };
}

/** A /healthz ping slower than this is listed with when it happened (about the 50 ms one synchronous step may take). */
const SLOW_PING_MS = 50;

/** The server's longest event-loop delay since the previous scrape (prom-client resets it on each collect), ms. */
async function serverLoopMaxMs(http: Http): Promise<number | undefined> {
  const text = String((await http.call('GET', '/metrics').catch(() => ({ body: '' }))).body);
  const m = /^nodejs_eventloop_lag_max_seconds(?:\{[^}]*\})? ([0-9.e+-]+)$/m.exec(text);
  return m ? Math.round(Number(m[1]) * 10_000) / 10 : undefined;
}

function worstOf(latencies: number[]) {
  return {
    worst: latencies.length ? Math.round(Math.max(...latencies) * 10) / 10 : NaN,
    pings: latencies.length,
    over100: latencies.filter((x) => x > 100).length,
  };
}

function submitClaimLoop(http: Http, tag: string, gapMs: number) {
  const samples: Array<[number, number]> = [];
  let errors = 0;
  let looping = true;
  const done = (async () => {
    while (looping) {
      try {
        const at = Date.now();
        const t = performance.now();
        await http.call('POST', `/v1/agents/${agentName(1)}/executions`, { message: 'probe', payload: { probe: tag } });
        const claimed = (
          await http.call('POST', `/v1/agents/${agentName(1)}/claim`, { worker_id: 'bench-prune', max: 1, wait_seconds: 10 })
        ).body;
        const task = claimed?.tasks?.[0];
        if (task) {
          samples.push([at, performance.now() - t]);
          await http.call('POST', `/v1/executions/${enc(task.execution_id)}/complete`, {
            lease_token: task.lease_token,
            status: 'succeeded',
          });
        } else errors++;
      } catch {
        errors++;
      }
      await sleep(gapMs);
    }
  })();
  return {
    samples,
    async stop() {
      looping = false;
      await done;
      return { samples, errors };
    },
  };
}

async function timed<T>(fn: () => Promise<T>): Promise<[number, T]> {
  const t0 = performance.now();
  const out = await fn();
  return [performance.now() - t0, out];
}

/**
 * Every probe server runs with the canary timer off and retention off, so each probe measures
 * itself: the canary's cost is its own probe, the pruner's its own phase (the default
 * retention, 30 days, would otherwise start pruning this 35-day history during the probes).
 */
const QUIET: Record<string, string> = { BATON_CANARY_INTERVAL_MS: '0', BATON_RETENTION_DAYS: '0' };
/** After the first canary cycle, more only while the probe's canary time stays under this. */
const CANARY_BUDGET_MS = 120_000;
/**
 * The canary's catch-up over the filled event log, at most this long: 400 s, or 80 s per million
 * executions when more. At 10M the catch-up takes longer than 400 s, and
 * cycles measured before it ends would still be reading the filled log in chunks, which a deployment that grew
 * one event at a time never does.
 */
const catchUpBudgetMs = (n: number) => Math.max(400_000, (n / 1_000_000) * 80_000);
/** Any other probe: more repetitions only while it has taken less than this. */
const PROBE_BUDGET_MS = 60_000;

const enc = encodeURIComponent;
const agentName = (i: number) => `hist-${String(i).padStart(3, '0')}`;
/**
 * The fire-lag probe's agents (bench/lib/triggers-fire-lag.ts), made with the history agents before
 * the empty store's probes, so that every state's agents list, metrics and canary see the same 200 agents.
 */
const FIRE_PREFIX = 'hfl-';
const FIRE_AGENTS = 100;

/** After a fire-lag probe: its schedules deleted through the engine, which cancels their queued runs (history stays). */
async function settleFireLag(db: HistoryDb): Promise<void> {
  const s = await db.open();
  const e = new Engine({ store: s, nodeId: 'bench-history' });
  try {
    const fired = await s.db.selectFrom('schedules').select('id').where('agent', 'like', `${FIRE_PREFIX}%`).execute();
    for (const { id } of fired) await e.schedules.delete(id, 'bench');
  } finally {
    e.close();
    await s.close();
  }
}

/** A cursor as the API returns it: base64url of "created_at:id" (src/api/routes/executions.ts). */
const cursor = (createdAt: number, id: string) => Buffer.from(`${createdAt}:${id}`).toString('base64url');
/** The agent + status probe cycles over this many agents, each given this many failed executions first. */
const FILTER_AGENTS = 10;
const FILTER_FAILURES = 50;

/**
 * Cursors for the deep page: 30 days back (one minute apart per repetition) when that page is
 * full, as it is in a long history; on a store younger than that (the empty store), cursors
 * past its 50th–89th newest rows, taken from the API's own `next_cursor`, so that page is full too.
 */
async function deepPageCursors(http: Http): Promise<{ basis: string; at: (i: number) => string }> {
  const deep = Date.now() - 30 * 86_400_000;
  const deepAt = (i: number) => cursor(deep + i * 60_000, 'ex_zzzzzzzzzzzzzzzzzzzzzz');
  const probe = (await http.call('GET', `/v1/executions?limit=50&cursor=${deepAt(0)}`)).body;
  if ((probe?.executions?.length ?? 0) === 50) return { basis: '30 days deep', at: deepAt };
  const young: string[] = [];
  for (let k = 50; k < 90; k++) {
    const next = (await http.call('GET', `/v1/executions?limit=${k}`)).body?.next_cursor;
    if (typeof next === 'string') young.push(next);
  }
  if (!young.length) throw new Error('deep cursor: the store has too few executions for a full page');
  return {
    basis: `the store is younger than 30 days: past its 50th–${49 + young.length}th newest rows`,
    at: (i) => young[i % young.length]!,
  };
}

// ── probes ──────────────────────────────────────────────────────────────────

async function runProbes(cfg: HistoryConfig, db: HistoryDb, label: string, port: number, detailIds: string[]): Promise<StateResult> {
  const errors: string[] = [];
  const executions = await countExecutions(db);
  // The machine is shared: wait (up to 30 s) for it to calm down, and record how busy it was.
  const busyBefore = await waitForQuiet(25, 30_000);
  cfg.log(`  [${label}] machine ${busyBefore ?? '?'} % busy before the probes`);
  const server = await startServer(db, 'spawn', { port, env: QUIET });
  const http = new Http(server.url, server.key);
  const probes: Partial<Record<ProbeName, LatencySummary>> = {};
  const cpuPerOp: Partial<Record<ProbeName, number | null>> = {};
  const busy: Partial<Record<ProbeName, number | null>> = {};
  const pgTicks = () => (cfg.store === 'postgres' ? pgBackendTicks(cfg.pgUrl, [server.pid]) : Promise.resolve(undefined));
  const meterStart = async () => {
    const before = await pgTicks();
    const m = cpuMeter(server.pid);
    return async (name: ProbeName, reps: number) => {
      const after = await pgTicks();
      const u = m.stop(before, after);
      const cpu = u.server_s === null ? null : u.server_s + (u.postgres_s ?? 0);
      cpuPerOp[name] = cpu === null || reps === 0 ? null : Math.round((cpu * 1000 * 100) / reps) / 100;
      busy[name] = u.machine_busy_pct;
    };
  };
  const submitToClaim: number[] = [];
  const worst: StateResult['healthz_worst'] = { startup: NaN, canary: NaN, metrics: NaN };
  const pings: StateResult['healthz_pings'] = { startup: 0, canary: 0, metrics: 0 };
  let canaryFirst = NaN;
  let catchUp: StateResult['canary_catch_up'];
  let canaryFull: StateResult['canary_full'];
  let canaryFirstReport: unknown;
  const log = (m: string) => cfg.log(`  [${label}] ${m}`);
  try {
    // The first 5 s after start (scheduler, reaper, dispatcher loops start), pinging meanwhile.
    {
      const hz = healthzLoop(server.url);
      await sleep(5_000);
      const h = await hz.stop();
      worst.startup = h.worst;
      pings.startup = h.pings;
    }
    const reps = cfg.reps;
    const measure = async (name: ProbeName, n: number, fn: (i: number) => Promise<unknown>) => {
      const sample: number[] = [];
      const stopMeter = await meterStart();
      try {
        const t0 = performance.now();
        for (let i = 0; i < n; i++) {
          // A probe that became slow stops after PROBE_BUDGET_MS (with at least 5 repetitions).
          if (i >= 5 && performance.now() - t0 > PROBE_BUDGET_MS) {
            log(`${name}: stopped after ${i} repetitions (over ${PROBE_BUDGET_MS / 1000} s)`);
            break;
          }
          sample.push((await timed(() => fn(i)))[0]);
        }
        await stopMeter(name, sample.length);
        probes[name] = summarize(sample);
        log(
          `${PROBE_LABEL[name]}: p50 ${probes[name]!.p50.toFixed(2)} ms, p99 ${probes[name]!.p99.toFixed(2)} ms; CPU ${cpuPerOp[name] ?? '?'} ms/op; machine ${busy[name] ?? '?'} % busy`,
        );
      } catch (err: any) {
        errors.push(`${name}: ${err?.message ?? err}`);
        log(`${name} FAILED: ${err?.message ?? err}`);
        if (sample.length) probes[name] = summarize(sample);
      }
    };
    await measure('healthz', reps, () => http.call('GET', '/healthz'));
    // Submit → claim → complete on a history agent (warm up a few first).
    const probeAgent = agentName(0);
    const made: string[] = [];
    const cycle = async (record: boolean, agent = probeAgent, outcome: 'succeeded' | 'failed' = 'succeeded') => {
      const t0 = performance.now();
      const sub = (await http.call('POST', `/v1/agents/${agent}/executions`, { message: 'probe', payload: { probe: label } })).body;
      const claimed = (await http.call('POST', `/v1/agents/${agent}/claim`, { worker_id: 'bench-probe', max: 1, wait_seconds: 5 })).body;
      const t1 = performance.now();
      const task = claimed?.tasks?.[0];
      if (!task) throw new Error('claim returned no task');
      if (task.execution_id !== sub.execution_id) throw new Error(`claimed ${task.execution_id}, submitted ${sub.execution_id}`);
      await http.call('POST', `/v1/executions/${enc(task.execution_id)}/complete`, {
        lease_token: task.lease_token,
        status: outcome,
        ...(outcome === 'failed' ? { error: { code: 'probe_failure', message: 'a failure the probe made' } } : { result: { ok: true } }),
      });
      if (record) submitToClaim.push(t1 - t0);
      made.push(task.execution_id);
    };
    for (let i = 0; i < 10; i++) await cycle(false);
    await measure('submit_claim_complete', reps, () => cycle(true));
    await measure('agents_list', reps, () => http.call('GET', '/v1/agents'));
    await measure('executions_first_page', reps, () => http.call('GET', '/v1/executions?limit=50'));
    // Like for like: the filtered and the deep page return a full page (50 rows) in every state,
    // so the ratio compares the cost of reaching a page, not 50 rows of JSON against none. The
    // filter's agents each get FILTER_FAILURES failed executions of the probe's own first (the
    // empty store has none; at N they are the newest of a few hundred each), each followed by two
    // successes so that the agent's circuit breaker (on by default) stays closed.
    await Promise.all(
      Array.from({ length: FILTER_AGENTS }, async (_, a) => {
        for (let k = 0; k < FILTER_FAILURES; k++) {
          await cycle(false, agentName(a), 'failed');
          await cycle(false, agentName(a));
          await cycle(false, agentName(a));
        }
      }),
    );
    await measure('executions_agent_status', reps, (i) =>
      http.call('GET', `/v1/executions?agent=${agentName((i * 7) % FILTER_AGENTS)}&status=failed&limit=50`),
    );
    const deepCursors = await deepPageCursors(http);
    log(`deep cursor page: ${deepCursors.basis}`);
    await measure('executions_deep_cursor', reps, (i) => http.call('GET', `/v1/executions?limit=50&cursor=${deepCursors.at(i)}`));
    const ids = detailIds.length ? detailIds : made;
    await measure('execution_detail', reps, (i) => http.call('GET', `/v1/executions/${enc(ids[i % ids.length]!)}`));
    // The same read of executions the probe itself made just before (at N as on the empty store):
    // what reading one costs apart from where in the history it lies.
    await measure('execution_detail_recent', reps, (i) => http.call('GET', `/v1/executions/${enc(made[i % made.length]!)}`));
    await measure('dashboard_overview', reps, () =>
      Promise.all([
        http.call('GET', '/v1/agents'),
        http.call('GET', '/v1/executions?status=failed&limit=8'),
        http.call('GET', '/v1/canary'),
      ]),
    );
    {
      const hz = healthzLoop(server.url);
      await measure('metrics_scrape', cfg.metricsReps, () => http.call('GET', '/metrics'));
      const h = await hz.stop();
      worst.metrics = h.worst;
      pings.metrics = h.pings;
    }
    {
      const hz = healthzLoop(server.url);
      const sample: number[] = [];
      let stopMeter = await meterStart();
      try {
        let c0 = performance.now();
        for (let i = 0; i < cfg.canaryReps; i++) {
          if (i === 1) {
            c0 = performance.now();
            stopMeter = await meterStart(); // CPU per cycle of the measured cycles only
          }
          if (i > 1 && performance.now() - c0 > CANARY_BUDGET_MS) {
            log(`canary: stopped after ${i} cycles (over ${CANARY_BUDGET_MS / 1000} s)`);
            break;
          }
          const [ms, r] = await timed(() => http.call('POST', '/v1/canary/run', undefined, 900_000));
          if (i === 0) {
            canaryFirst = Math.round(ms * 10) / 10;
            canaryFirstReport = summarizeReport(r.body);
            // The fill wrote its events behind the canary's back; a canary that follows the
            // event log (checkpoints) reads them in bounded chunks first. Let it catch up (as
            // it would have while the history grew), timing that apart, then measure cycles.
            if (r.body?.events && r.body.events.caught_up === false) {
              const k0 = performance.now();
              let cycles = 1;
              let read = Number(r.body.events.read ?? 0);
              let worstCycle = ms;
              let caught = false;
              while (performance.now() - k0 < catchUpBudgetMs(cfg.n)) {
                const [m2, r2] = await timed(() => http.call('POST', '/v1/canary/run', undefined, 900_000));
                cycles++;
                worstCycle = Math.max(worstCycle, m2);
                read += Number(r2.body?.events?.read ?? 0);
                if (r2.body?.events?.caught_up !== false) {
                  caught = true;
                  break;
                }
              }
              catchUp = {
                cycles,
                seconds: Math.round((ms + performance.now() - k0) / 100) / 10,
                events_read: read,
                worst_cycle_ms: Math.round(worstCycle),
                caught_up: caught,
              };
              log(
                `canary catch-up: ${cycles} cycles, ${catchUp.seconds} s, ${read.toLocaleString('en-US')} events, slowest cycle ${catchUp.worst_cycle_ms} ms${caught ? '' : ' (not caught up within the budget)'}`,
              );
            }
            continue; // the first cycle is reported on its own; the probe is the cycles after it
          }
          sample.push(ms);
        }
        await stopMeter('canary_cycle', sample.length);
        probes.canary_cycle = summarize(sample);
        log(`canary cycle: first ${canaryFirst} ms, p50 ${probes.canary_cycle.p50.toFixed(1)} ms`);
      } catch (err: any) {
        errors.push(`canary_cycle: ${err?.message ?? err}`);
        log(`canary FAILED: ${err?.message ?? err}`);
      }
      const h = await hz.stop();
      worst.canary = h.worst;
      pings.canary = h.pings;
      log(`worst /healthz: startup ${worst.startup} ms, metrics ${worst.metrics} ms, canary ${worst.canary} ms`);
    }
    {
      // The full check over all history, on demand (in bounded chunks, the event loop free between them).
      const hz = healthzLoop(server.url);
      try {
        const [ms, r] = await timed(() => http.call('POST', '/v1/canary/run', { full: true }, 900_000));
        if (r.status !== 200) throw new Error(`status ${r.status}`);
        canaryFull = { ms: Math.round(ms), events_read: Number(r.body?.events?.read ?? 0) };
        log(`canary full check: ${canaryFull.ms} ms, ${canaryFull.events_read.toLocaleString('en-US')} events`);
      } catch (err: any) {
        canaryFull = { error: String(err?.message ?? err) };
        errors.push(`canary_full: ${err?.message ?? err}`);
        log(`canary full check FAILED: ${err?.message ?? err}`);
      }
      const h = await hz.stop();
      worst.canary_full = h.worst;
      pings.canary_full = h.pings;
      log(`worst /healthz during the full check: ${worst.canary_full} ms`);
    }
  } finally {
    await closeFetchPool();
    await server.stop();
  }
  // 1,000 schedules due at one instant, fired by one `baton up` (its own process).
  let fire: StateResult['fire_lag'];
  if (cfg.schedules > 0) {
    try {
      const r = await runFireLag({
        store: cfg.store,
        pgUrl: cfg.pgUrl,
        db,
        schedules: cfg.schedules,
        agents: FIRE_AGENTS,
        processes: 1,
        agentPrefix: FIRE_PREFIX,
        basePort: port + 1,
        serverEnv: QUIET,
      });
      fire = { schedules: r.schedules, fired: r.fired, p50: r.lagMs.p50, p99: r.lagMs.p99, drain_ms: r.drainMs, cpu_s: r.cpuS };
      log(`${cfg.schedules} schedules: fire lag p50 ${r.lagMs.p50} ms, p99 ${r.lagMs.p99} ms (${r.fired} fired)`);
    } catch (err: any) {
      fire = { error: String(err?.message ?? err) };
      errors.push(`fire_lag: ${err?.message ?? err}`);
      log(`fire lag FAILED: ${err?.message ?? err}`);
    } finally {
      // Its schedules go (their queued runs cancelled), also after a failed probe: the next state's
      // probes must not find a thousand queued runs left behind, and its schedules are made again.
      await settleFireLag(db).catch((err: any) => errors.push(`fire_lag clean-up: ${err?.message ?? err}`));
    }
  }
  return {
    executions,
    probes,
    cpu_ms_per_op: cpuPerOp,
    machine_busy_pct: busy,
    busy_before_pct: busyBefore,
    submit_to_claim: summarize(submitToClaim),
    healthz_worst: worst,
    healthz_pings: pings,
    canary_first_ms: canaryFirst,
    canary_first_report: canaryFirstReport,
    canary_catch_up: catchUp,
    canary_full: canaryFull,
    fire_lag: fire,
    errors,
  };
}

function summarizeReport(r: any): unknown {
  if (!r || typeof r !== 'object') return r;
  const { results, invariants, ...rest } = r;
  return rest;
}

/** Drop pooled keep-alive connections before stopping a server (see bench/lib/drivers.ts). */
async function closeFetchPool(): Promise<void> {
  const key = Symbol.for('undici.globalDispatcher.1');
  const g = globalThis as unknown as Record<symbol, { constructor: new () => unknown; destroy?: () => Promise<void> } | undefined>;
  const current = g[key];
  if (!current || typeof current.destroy !== 'function') return;
  g[key] = new current.constructor() as never;
  await current.destroy().catch(() => {});
}

// ── prune ───────────────────────────────────────────────────────────────────

async function runPrune(cfg: HistoryConfig, db: HistoryDb, port: number): Promise<PruneResult> {
  const p = await peek(db);
  const log = (m: string) => cfg.log(`  [prune] ${m}`);
  let server: RunningServer | undefined;
  try {
    const cutoff = Date.now() - cfg.retentionDays * 86_400_000;
    const countOld = async () =>
      Number((await p.one<{ n: number }>('SELECT count(*) AS n FROM executions WHERE completed_at < $1', [cutoff]))!.n);
    const eligible = await countOld();
    const stateOf = async () => (await p.one<Record<string, unknown>>(`SELECT * FROM retention_state WHERE id = 'retention'`)) ?? {};
    const before = await stateOf();
    log(
      `${eligible.toLocaleString('en-US')} executions completed more than ${cfg.retentionDays} days ago; starting baton up with BATON_RETENTION_DAYS=${cfg.retentionDays}`,
    );
    // The baseline of "W2 latency at most doubles while the pruner works": the same probe, with the
    // same /healthz pings beside it, against the same store with retention off, just before.
    let idle: { s2c: number[]; healthzWorst: number } | undefined;
    if (cfg.pruneIdleS > 0) {
      const quiet = await startServer(db, 'spawn', { port: port + 1, env: QUIET });
      try {
        const qhz = healthzLoop(quiet.url);
        const q = submitClaimLoop(new Http(quiet.url, quiet.key), 'prune-idle', cfg.pruneProbeGapMs);
        await sleep(cfg.pruneIdleS * 1000);
        const r = await q.stop();
        idle = { s2c: r.samples.map((x) => x[1]), healthzWorst: (await qhz.stop()).worst };
      } finally {
        await quiet.stop();
      }
      const is = summarize(idle.s2c);
      log(
        `idle baseline (${cfg.pruneIdleS} s, retention off): submit→claim p50 ${is.p50} / p99 ${is.p99} ms (n ${is.n}); worst /healthz ${idle.healthzWorst} ms`,
      );
    }
    // Reaper lapses during the phase: events after this id that took a running row away.
    const firstEvent = Number((await p.one<{ m: number | null }>('SELECT max(id) AS m FROM execution_events'))?.m ?? 0);
    const t0 = Date.now();
    // Plain `baton up`, its pruner's first sweep ~1 s (± 20 %) after start instead of 10 min.
    server = await startServer(db, 'spawn', {
      port,
      env: { BATON_CANARY_INTERVAL_MS: '0', BATON_RETENTION_DAYS: String(cfg.retentionDays), BATON_PRUNE_INTERVAL_MS: '1000' },
    });
    const up = Date.now();
    const http = new Http(server.url, server.key);
    const hz = healthzLoop(server.url);
    const benchLoop = stallWatch();
    // A healthy long task held through the whole prune: claimed once, heartbeated every 10 s
    // (a third of the default 30 s lease, as the SDK does). A heartbeat refused means its lease lapsed.
    const held = { beats: [] as number[], lost: 0, errors: 0, id: '', token: '' };
    await http.call('POST', `/v1/agents/${agentName(2)}/executions`, { message: 'long', payload: { probe: 'prune-held' } });
    const heldTask = (await http.call('POST', `/v1/agents/${agentName(2)}/claim`, { worker_id: 'bench-held', max: 1, wait_seconds: 10 }))
      .body?.tasks?.[0];
    if (heldTask) Object.assign(held, { id: heldTask.execution_id, token: heldTask.lease_token });
    let beating = Boolean(heldTask);
    const beat = (async () => {
      while (beating) {
        await sleep(10_000);
        if (!beating) break;
        const t = performance.now();
        try {
          await http.call('POST', `/v1/executions/${enc(held.id)}/heartbeat`, { lease_token: held.token });
          held.beats.push(performance.now() - t);
        } catch (err) {
          if (/→ 409/.test(String(err))) held.lost++;
          else held.errors++;
        }
      }
    })();
    // submit → claim → complete one after another, cfg.pruneProbeGapMs apart, while the pruner works.
    const loop = submitClaimLoop(http, 'prune', cfg.pruneProbeGapMs);
    // Progress by counting (the pruner records a sweep in retention_state only when it ends):
    // the old rows left, every second, through the executions_completed index.
    let available = false;
    let note: string | undefined;
    let left = eligible;
    let firstDropAt: number | null = null;
    let doneAt: number | null = null;
    let lastProgressAt = Date.now();
    const progress: Array<[number, number]> = [];
    // The pruner's own records: one per sweep that removed executions.
    const sweeps: Array<Record<string, unknown>> = [];
    let lastSeen = before.last_completed_at;
    const watchState = async () => {
      const st = await stateOf();
      if (st.last_completed_at !== lastSeen) {
        lastSeen = st.last_completed_at;
        if (Number(st.last_executions ?? 0) > 0) sweeps.push(st);
      }
      return st;
    };
    // Rows removed so far, from the pruner's running total (updated in each batch's transaction):
    // a one-row read. Counting the old rows instead would hold this process's event loop on SQLite
    // at 1M (better-sqlite3 is synchronous) and show up as /healthz latency.
    const totalBefore = Number(before.total_executions ?? 0);
    for (;;) {
      await sleep(1000);
      const st = await watchState();
      const now = Date.now();
      const n = Math.max(0, eligible - (Number(st.total_executions ?? 0) - totalBefore));
      progress.push([now - up, n]);
      if (n < left) {
        available = true;
        // The server's own event-loop delay, from the first removal seen: this scrape resets it.
        if (firstDropAt === null) await serverLoopMaxMs(http);
        firstDropAt ??= now;
        lastProgressAt = now;
        left = n;
      }
      if (available && left === 0) {
        doneAt = now;
        break;
      }
      // The sweep that removed rows is recorded and the count stands still: done (the pruner may
      // keep a few rows past the window on purpose; they show as `remaining`).
      if (available && sweeps.length > 0 && progress.length >= 2 && progress[progress.length - 2]![1] === n) {
        doneAt = lastProgressAt;
        break;
      }
      if (!available && now - up > cfg.pruneDetectS * 1000) {
        note = `pruner not available: no execution past the window was removed within ${cfg.pruneDetectS} s of starting baton up with BATON_RETENTION_DAYS=${cfg.retentionDays}`;
        break;
      }
      if (available && now - lastProgressAt > 60_000) {
        note = `the pruner stopped making progress with ${left.toLocaleString('en-US')} of ${eligible.toLocaleString('en-US')} left`;
        break;
      }
      if (now - t0 > cfg.pruneMaxS * 1000) {
        note = `stopped after --history-prune-max-s ${cfg.pruneMaxS} s with ${left.toLocaleString('en-US')} left`;
        break;
      }
    }
    const serverLoopMax = available ? await serverLoopMaxMs(http) : undefined;
    // Keep pinging until the sweep is recorded (then a few seconds of SQLite's vacuum steps).
    let state = await watchState();
    if (available) {
      const until = Date.now() + 60_000;
      while (Date.now() < until && sweeps.length === 0) {
        await sleep(500);
        state = await watchState();
      }
      await sleep(5_000);
      state = await watchState();
    }
    beating = false;
    const { samples, errors: submitErrors } = await loop.stop();
    const s2c = samples.map((x) => x[1]);
    await beat;
    // The samples that started while a sweep that removed executions ran (the pruner's own times);
    // a sweep still running when the phase stopped (--history-prune-max-s) has no record yet: then
    // from the poll before the first removal seen to the last one.
    const windows: Array<[number, number]> = sweeps.length
      ? sweeps.map((w) => [Number(w.last_started_at), Number(w.last_completed_at)])
      : firstDropAt !== null
        ? [[firstDropAt - 1000, lastProgressAt]]
        : [];
    const during = ([at]: [number, number]) => windows.some(([from, to]) => at >= from && at <= to);
    const sweeping = summarize(samples.filter(during).map((x) => x[1]));
    const idleS2c = idle ? summarize(idle.s2c) : undefined;
    const w2Ratio =
      idleS2c && sweeping.n > 0
        ? { p50: Math.round((sweeping.p50 / idleS2c.p50) * 100) / 100, p99: Math.round((sweeping.p99 / idleS2c.p99) * 100) / 100 }
        : undefined;
    const idleFields = { idle_submit_to_claim: idleS2c, idle_healthz_worst_ms: idle?.healthzWorst, w2_ratio: w2Ratio };
    if (held.id)
      await http
        .call('POST', `/v1/executions/${enc(held.id)}/complete`, { lease_token: held.token, status: 'succeeded' })
        .catch(() => held.lost++);
    const lapses = Number(
      (
        await p.one<{ n: number }>(
          `SELECT count(*) AS n FROM execution_events WHERE id > $1 AND from_status = 'running' AND actor LIKE 'reaper:%'`,
          [firstEvent],
        )
      )?.n ?? 0,
    );
    const heldLease: PruneResult['held_lease'] = {
      claimed: Boolean(heldTask),
      heartbeats: held.beats.length,
      heartbeat_max_ms: held.beats.length ? Math.round(Math.max(...held.beats) * 10) / 10 : undefined,
      lost: held.lost,
      errors: held.errors,
      reaper_lapses: lapses,
    };
    // /healthz: the pings that started while a sweep ran; the whole phase (with the server's start,
    // whose first requests are cold) is kept apart.
    const phase = await hz.stop();
    const bench = benchLoop.stop();
    const h = available ? worstOf(phase.samples.filter(during).map((x) => x[1])) : phase;
    // Each ping over SLOW_PING_MS in the phase: when (ms from the server's start, and from the end of the
    // last sweep window: negative while sweeping), and whether this process's own loop stalled meanwhile.
    const sweepEnd = windows.length ? Math.max(...windows.map((w) => w[1])) : NaN;
    const slowPings = phase.samples
      .filter((x) => x[1] > SLOW_PING_MS)
      .map(([at, ms]) => ({
        at,
        ms: Math.round(ms * 10) / 10,
        sweeping: available && during([at, ms]),
        since_up_ms: at - up,
        since_sweep_end_ms: at - sweepEnd,
        bench_stall_ms: bench.stalls.filter(([end, gap]) => end >= at && end - gap <= at + ms).reduce((a, [, gap]) => Math.max(a, gap), 0),
      }));
    const phaseFields = {
      healthz_phase_worst_ms: phase.worst,
      healthz_phase_pings: phase.pings,
      healthz_slow_pings: slowPings,
      healthz_after_sweep_worst_ms: Number.isFinite(sweepEnd)
        ? worstOf(phase.samples.filter(([at]) => at > sweepEnd).map((x) => x[1])).worst
        : undefined,
      server_loop_max_ms: serverLoopMax,
      bench_loop_max_ms: bench.max_ms,
      bench_loop_stalls: bench.stalls.length,
    };
    if (!available) {
      log(note!);
      cfg.log('pruner not available');
      return {
        available: false,
        note,
        eligible,
        healthz_worst_ms: h.worst,
        healthz_pings: h.pings,
        healthz_over_100ms: h.over100,
        ...phaseFields,
        submit_to_claim: summarize(s2c),
        ...idleFields,
        submit_errors: submitErrors,
        held_lease: heldLease,
      };
    }
    const removed = eligible - left;
    const end = doneAt ?? lastProgressAt;
    const seconds = Math.max(0.001, (end - up) / 1000);
    const ownExec = sweeps.reduce((a, x) => a + Number(x.last_executions ?? 0), 0);
    const ownMs = sweeps.reduce((a, x) => a + Number(x.last_duration_ms ?? 0), 0);
    const out: PruneResult = {
      available: true,
      note,
      eligible,
      removed,
      seconds: Math.round(seconds * 10) / 10,
      rate_per_s: Math.round(removed / seconds),
      own_rate_per_s: ownExec > 0 && ownMs > 0 ? Math.round(ownExec / (ownMs / 1000)) : undefined,
      first_removal_after_s: firstDropAt ? Math.round((firstDropAt - up) / 100) / 10 : undefined,
      retention_state: state,
      sweeps,
      progress,
      healthz_worst_ms: h.worst,
      healthz_pings: h.pings,
      healthz_over_100ms: h.over100,
      ...phaseFields,
      submit_to_claim: summarize(s2c),
      submit_to_claim_sweeping: sweeping,
      ...idleFields,
      submit_errors: submitErrors,
      remaining: left,
      held_lease: heldLease,
    };
    log(
      `removed ${removed.toLocaleString('en-US')} in ${out.seconds} s = ${out.rate_per_s?.toLocaleString('en-US')}/s (pruner's own record: ${out.own_rate_per_s ?? '?'}/s); worst /healthz ${h.worst} ms (longest event-loop delay: server ${serverLoopMax ?? '?'} ms, bench ${bench.max_ms} ms; pings over ${SLOW_PING_MS} ms [ms, sweeping, ms after the sweep's end, bench stall ms]: ${JSON.stringify(slowPings.map((x) => [x.ms, x.sweeping, x.since_sweep_end_ms, x.bench_stall_ms]))}); submit→claim p50 ${out.submit_to_claim!.p50} ms, max ${out.submit_to_claim!.max} ms`,
    );
    log(
      `submit→claim while sweeping: p50 ${sweeping.p50} / p99 ${sweeping.p99} ms (n ${sweeping.n}); idle baseline p50 ${idleS2c?.p50 ?? '?'} / p99 ${idleS2c?.p99 ?? '?'} ms; ratio p50 ${w2Ratio?.p50 ?? '?'}× p99 ${w2Ratio?.p99 ?? '?'}×`,
    );
    return out;
  } finally {
    await closeFetchPool();
    await server?.stop();
    await p.close();
  }
}

// ── the scenario ────────────────────────────────────────────────────────────

export async function runHistory(c: Partial<HistoryConfig> & Pick<HistoryConfig, 'store' | 'pgUrl' | 'log'>): Promise<HistoryResult> {
  const cfg: HistoryConfig = { ...HISTORY_DEFAULTS, ...c };
  const out: HistoryResult = { store: cfg.store, n: cfg.n };
  const db = historyDb(cfg.store, cfg.pgUrl);
  const port = cfg.basePort + (cfg.store === 'postgres' ? 50 : 0);
  cfg.log(`▶ ${cfg.store} history: ${db.kind === 'sqlite' ? db.file : `schema ${db.schema}`}`);
  try {
    // Agents through the engine, as an operator would make them.
    const agents: FillAgent[] = [];
    {
      const s = await db.open();
      const e = new Engine({ store: s, nodeId: 'bench-history' });
      await createHistoryPool(e);
      for (let i = 0; i < 100; i++) {
        const a = { name: agentName(i), max_parallel: [1, 2, 3, 4, 8][i % 5]! };
        await e.agents.create({ ...a, max_backlog: 10_000, ...historyFlowSettings(i) }, 'bench');
        agents.push({ ...a, ...(i === KEYED_AGENT ? { keys: HISTORY_KEYS } : {}) });
      }
      // As triggers-fire-lag.ts would make them on its first run.
      if (cfg.schedules > 0)
        for (let i = 0; i < FIRE_AGENTS; i++) await e.agents.create({ name: `${FIRE_PREFIX}${i}`, max_backlog: 1_000_000 }, 'bench');
      e.close();
      await s.close();
    }
    if (!cfg.pruneOnly) {
      cfg.log(`  empty store: probes …`);
      out.empty = await runProbes(cfg, db, 'empty', port, []);
    }
    const emptyBytes = await bytesOnDisk(db);

    cfg.log(`  filling ${cfg.n.toLocaleString('en-US')} executions over ${cfg.days} days …`);
    out.fill = await fillHistory(
      { kind: cfg.store, file: db.file, url: db.url, schema: db.schema },
      { n: cfg.n, agents, days: cfg.days, now: Date.now(), batch: cfg.batch, seed: 10, log: cfg.log },
    );
    cfg.log(
      `  filled in ${out.fill.seconds} s (${out.fill.executions_per_s.toLocaleString('en-US')}/s), ANALYZE ${out.fill.analyze_seconds} s`,
    );
    const fullBytes = await bytesOnDisk(db);
    out.bytes = {
      empty: emptyBytes,
      full: fullBytes,
      per_execution: Math.round(fullBytes / cfg.n),
      per_execution_net: Math.round((fullBytes - emptyBytes) / cfg.n),
      how:
        db.kind === 'sqlite'
          ? 'SQLite main file + WAL after wal_checkpoint(TRUNCATE)'
          : "sum of pg_total_relation_size over the schema's tables (heap, TOAST, indexes)",
    };
    cfg.log(`  ${(fullBytes / 2 ** 20).toFixed(0)} MiB on disk: ${out.bytes.per_execution.toLocaleString('en-US')} bytes per execution`);

    // Ids to read back: spread over the whole history.
    const detailIds: string[] = [];
    {
      const p = await peek(db);
      try {
        const span = out.fill.newest_created_at - out.fill.oldest_created_at;
        for (let i = 0; i < 100; i++) {
          const at = Math.floor(out.fill.oldest_created_at + (span * (i + 0.5)) / 100);
          const r = await p.one<{ id: string }>('SELECT id FROM executions WHERE created_at >= $1 ORDER BY created_at LIMIT 1', [at]);
          if (r) detailIds.push(r.id);
        }
      } finally {
        await p.close();
      }
    }
    if (!cfg.pruneOnly) {
      cfg.log(`  at ${cfg.n.toLocaleString('en-US')}: probes …`);
      out.full = await runProbes(cfg, db, `N=${cfg.n}`, port + 10, detailIds);
    }
    if (!cfg.noPrune) {
      cfg.log(`  prune half of the history …`);
      out.prune = await runPrune(cfg, db, port + 20);
    }
    return out;
  } catch (err: any) {
    cfg.log(`  history failed: ${err?.stack ?? err}`);
    out.error = String(err?.message ?? err);
    return out;
  } finally {
    await db.cleanup().catch((err) => cfg.log(`  cleanup failed: ${err?.message ?? err}`));
  }
}

// ── output ──────────────────────────────────────────────────────────────────

const f = (x: number | undefined | null, d = 1) =>
  x === undefined || x === null || Number.isNaN(x)
    ? '–'
    : x.toLocaleString('en-US', { minimumFractionDigits: d, maximumFractionDigits: d });

/** ", 2 while the bench's own loop stalled" — how many slow pings overlapped a stall of this process (> 50 ms). */
function slowPingNote(p: PruneResult): string {
  const slow = (p.healthz_slow_pings ?? []).filter((x) => x.sweeping && x.ms > 100);
  if (!slow.length) return '';
  return `; ${slow.filter((x) => x.bench_stall_ms > 0).length} of them while the bench's own event loop stalled`;
}

export const HISTORY_HEAD = [
  'store',
  'probe',
  'empty p50 / p95 / p99 ms',
  'at N p50 / p95 / p99 ms',
  'ratio p50',
  'target',
  '',
  'CPU ms/op empty → N (machine busy %)',
];

/** Table rows: one per probe, then canary, /healthz, fire lag, prune, bytes. */
export function historyRows(r: HistoryResult): string[][] {
  const rows: string[][] = [];
  const s = r.store;
  if (r.error) rows.push([s, 'history', 'FAILED', r.error.split('\n')[0]!.slice(0, 120), '', '', '']);
  const e = r.empty;
  const n = r.full;
  const trip = (x?: LatencySummary) => (x ? `${f(x.p50, 2)} / ${f(x.p95, 2)} / ${f(x.p99, 2)}` : '–');
  for (const name of PROBES) {
    const a = e?.probes[name];
    const b = n?.probes[name];
    const ratio = a && b ? b.p50 / a.p50 : NaN;
    let target = '≤ 1.5×';
    let verdict = a && b ? (ratio <= 1.5 ? 'met' : 'MISSED') : '';
    if (name === 'healthz') {
      target = 'reference';
      verdict = '';
    }
    if (name === 'canary_cycle') {
      target = '≤ 1.5× and ≤ 1,000 ms';
      verdict = a && b ? (ratio <= 1.5 && b.p50 <= 1000 ? 'met' : 'MISSED') : '';
    }
    const ce = e?.cpu_ms_per_op?.[name];
    const cn = n?.cpu_ms_per_op?.[name];
    const cpu =
      ce === undefined && cn === undefined
        ? ''
        : `${f(ce, 2)} → ${f(cn, 2)} (${e?.machine_busy_pct?.[name] ?? '?'} %, ${n?.machine_busy_pct?.[name] ?? '?'} %)`;
    rows.push([s, PROBE_LABEL[name], trip(a), trip(b), f(ratio, 2) + '×', target, verdict, cpu]);
  }
  if (e && n) {
    rows.push([
      s,
      'submit → claim (part of the cycle)',
      trip(e.submit_to_claim),
      trip(n.submit_to_claim),
      f(n.submit_to_claim.p50 / e.submit_to_claim.p50, 2) + '×',
      '≤ 1.5×',
      n.submit_to_claim.p50 / e.submit_to_claim.p50 <= 1.5 ? 'met' : 'MISSED',
    ]);
    rows.push([
      s,
      'first canary cycle after start',
      `${f(e.canary_first_ms, 0)} ms`,
      `${f(n.canary_first_ms, 0)} ms`,
      f(n.canary_first_ms / e.canary_first_ms, 1) + '×',
      '≤ 1,000 ms',
      n.canary_first_ms <= 1000 ? 'met' : 'MISSED',
    ]);
    const cu = n.canary_catch_up;
    if (cu)
      rows.push([
        s,
        'canary catch-up over the filled event log',
        '',
        `${cu.cycles} cycles in ${f(cu.seconds, 1)} s, ${f(cu.events_read, 0)} events, slowest ${f(cu.worst_cycle_ms, 0)} ms${cu.caught_up ? '' : ' — NOT caught up'}`,
        '',
        'each cycle ≤ 1,000 ms',
        cu.worst_cycle_ms <= 1000 ? 'met' : 'MISSED',
      ]);
    for (const k of ['startup', 'metrics', 'canary'] as const) {
      rows.push([
        s,
        `worst /healthz during ${k === 'startup' ? 'startup (first background cycles)' : k === 'metrics' ? 'metrics scrapes' : 'canary cycles'}`,
        `${f(e.healthz_worst[k], 1)} ms`,
        `${f(n.healthz_worst[k], 1)} ms`,
        '',
        '≤ 100 ms',
        n.healthz_worst[k] <= 100 ? 'met' : 'MISSED',
      ]);
    }
    const full = (x: StateResult) =>
      !x.canary_full
        ? '–'
        : 'error' in x.canary_full
          ? `error: ${x.canary_full.error.slice(0, 60)}`
          : `${f(x.canary_full.ms / 1000, 1)} s, ${f(x.canary_full.events_read, 0)} events`;
    if (n.canary_full)
      rows.push([
        s,
        'full canary check over all history (on demand): worst /healthz during it',
        `${f(e.healthz_worst.canary_full, 1)} ms (${full(e)})`,
        `${f(n.healthz_worst.canary_full, 1)} ms (${full(n)})`,
        '',
        '≤ 100 ms',
        (n.healthz_worst.canary_full ?? Infinity) <= 100 ? 'met' : 'MISSED',
      ]);
    const fl = (x: StateResult['fire_lag']) =>
      !x ? '–' : 'error' in x ? `error: ${x.error.slice(0, 60)}` : `p50 ${f(x.p50, 0)} / p99 ${f(x.p99, 0)} ms (${x.fired} fired)`;
    const fe = e.fire_lag && !('error' in e.fire_lag) ? e.fire_lag : undefined;
    const fn = n.fire_lag && !('error' in n.fire_lag) ? n.fire_lag : undefined;
    const fr = fe && fn ? fn.p99 / fe.p99 : NaN;
    if (e.fire_lag || n.fire_lag)
      rows.push([
        s,
        `${fe?.schedules ?? fn?.schedules ?? ''} schedules due at once: fire lag`,
        fl(e.fire_lag),
        fl(n.fire_lag),
        f(fr, 2) + '× (p99)',
        '≤ 1.5×',
        Number.isNaN(fr) ? '' : fr <= 1.5 ? 'met' : 'MISSED',
      ]);
  }
  if (r.prune) {
    const p = r.prune;
    if (!p.available) rows.push([s, 'prune half of the history', '', 'pruner not available', '', '≥ 20,000 /s', '']);
    else {
      const rate = p.own_rate_per_s ?? p.rate_per_s ?? 0;
      rows.push([
        s,
        'prune half of the history: rate',
        '',
        `${f(p.own_rate_per_s, 0)} executions/s by the pruner's record (sweep time); counted: ${f(p.removed, 0)} gone ${f(p.seconds, 1)} s after start = ${f(p.rate_per_s, 0)}/s${p.note ? ` — ${p.note}` : ''}`,
        '',
        '≥ 20,000 /s',
        rate >= 20_000 ? 'met' : 'MISSED',
      ]);
      rows.push([
        s,
        'worst /healthz during the prune',
        '',
        `${f(p.healthz_worst_ms, 1)} ms (${p.healthz_over_100ms} of ${p.healthz_pings} pings > 100 ms${slowPingNote(p)}); after the sweep (on SQLite its vacuum steps) ${f(p.healthz_after_sweep_worst_ms, 1)} ms; whole phase from the server's start ${f(p.healthz_phase_worst_ms, 1)} ms; longest event-loop delay while sweeping: server ${f(p.server_loop_max_ms, 1)} ms, bench ${f(p.bench_loop_max_ms, 1)} ms over the phase`,
        '',
        '≤ 100 ms',
        (p.healthz_worst_ms ?? Infinity) <= 100 ? 'met' : 'MISSED',
      ]);
      if (p.held_lease)
        rows.push([
          s,
          'a healthy task held through the prune (heartbeat every 10 s)',
          '',
          `${p.held_lease.claimed ? `${p.held_lease.heartbeats} heartbeats, slowest ${f(p.held_lease.heartbeat_max_ms, 1)} ms, ${p.held_lease.lost} refused` : 'not claimed'}; reaper lapses of running rows: ${p.held_lease.reaper_lapses}`,
          '',
          'no lapse',
          p.held_lease.claimed && p.held_lease.lost === 0 && p.held_lease.reaper_lapses === 0 ? 'met' : 'MISSED',
        ]);
      // The whole phase (sweep and, on SQLite, its vacuum steps) against the same loop on the same
      // store with retention off just before: the target is that W2's latency at most doubles
      // while the pruner works. (The empty store's probe is another loop — sequential, no pings, no held
      // lease — so it is no baseline for this one.)
      if (p.submit_to_claim) {
        const base = p.idle_submit_to_claim;
        const ratio = base ? p.submit_to_claim.p50 / base.p50 : undefined;
        rows.push([
          s,
          'submit → claim during the whole prune phase vs idle just before',
          base ? trip(base) : '',
          trip(p.submit_to_claim) + ` (max ${f(p.submit_to_claim.max, 0)})`,
          ratio === undefined ? '' : f(ratio, 2) + '×',
          '≤ 2× (p50)',
          ratio === undefined ? '' : ratio <= 2 ? 'met' : 'MISSED',
        ]);
      }
      if (p.idle_submit_to_claim && p.submit_to_claim_sweeping)
        rows.push([
          s,
          'submit → claim while sweeping (n) vs idle just before (n)',
          `${trip(p.idle_submit_to_claim)} (${p.idle_submit_to_claim.n})`,
          `${trip(p.submit_to_claim_sweeping)} (${p.submit_to_claim_sweeping.n})`,
          p.w2_ratio ? `${f(p.w2_ratio.p50, 2)}× (p99 ${f(p.w2_ratio.p99, 2)}×)` : '–',
          '≤ 2× (p50 and p99)',
          p.w2_ratio ? (p.w2_ratio.p50 <= 2 && p.w2_ratio.p99 <= 2 ? 'met' : 'MISSED') : '',
        ]);
    }
  }
  if (r.bytes)
    rows.push([
      s,
      'bytes on disk per execution',
      `${f(r.bytes.empty / 2 ** 20, 1)} MiB total`,
      `${f(r.bytes.per_execution, 0)} B (${f(r.bytes.full / 2 ** 20, 0)} MiB total)`,
      '',
      '—',
      '',
    ]);
  if (r.fill)
    rows.push([
      s,
      'fill (fast path, not a Baton figure)',
      '',
      `${f(r.fill.executions, 0)} in ${f(r.fill.seconds, 1)} s (${f(r.fill.executions_per_s, 0)}/s) + ANALYZE ${f(r.fill.analyze_seconds, 1)} s`,
      '',
      '',
      '',
    ]);
  for (const err of [...(e?.errors ?? []), ...(n?.errors ?? [])])
    rows.push([s, 'error', '', err.split('\n')[0]!.slice(0, 120), '', '', '']);
  return rows;
}
