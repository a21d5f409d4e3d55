/**
 * Baton engine benchmark. Measures; never asserts.
 *
 *   npm run bench                                  # full run: both stores, W1 + W2, HTTP + in-process
 *   npm run bench -- --store sqlite --tasks 2000   # quick smoke run
 *
 * Options (all optional):
 *   --store sqlite|postgres|both     default both
 *   --only w1|w2|users|history|scenarios   default W1, W2 and users (history is never in the default run)
 *   --users-systems baton-sdk,baton-sdk-per-agent,baton-hand,bullmq,graphile   the users' shape (default all but
 *                                    baton-sdk-per-agent; a system named twice runs twice, interleaved); --users-workloads w1,w2
 *                                    (default both); --users-in-flight N (default 32), --users-w2-submits N (default 300),
 *                                    --graphile-concurrency N (default 16), --redis-url URL, --redis-prefix P (default baton-bench)
 *   --scenarios worker,push,triggers,cli,bodies,backlog|none   after W1/W2 (default all; triggers: PostgreSQL only; cli:
 *                                    20 runs of two HTTP-only commands from the packed, installed package; backlog: one
 *                                    agent 0 to 300,000 queued)
 *   --mode http|inproc|both          default both
 *   --tasks N                        W1 tasks (default 20000)
 *   --agents N                       W1 agents (default 100), --max-parallel N (default 3)
 *   --loops N                        W1 claim loops (default 50), --claim-max N (default 3)
 *   --submit-concurrency N           W1 submits in flight (default 32)
 *   --idle-wait-ms N                 W1 long-poll when a loop's agents were all empty (default 200)
 *   --submit-batch N                 W1 tasks per submit, the batch route or engine.submitMany (default 1: single submits)
 *   --complete-claim                 W1 completions also claim the next task, one request (default off; HTTP only)
 *   --warmup-tasks N                 W1 warm-up tasks on separate agents, not measured (default tasks/10, 200..2000)
 *   --w2-submits N                   W2 measured submits (default 500), --w2-warmup N (default 20)
 *   --w2-agents N                    W2 is run twice: one agent, then submits spread over N agents, each with its own
 *                                    parked claim (default 100; 1 runs only the first)
 *   --server spawn|inproc            HTTP server as its own process (default) or startNode in this one
 *   --pg-url URL                     default $BATON_BENCH_DATABASE_URL or postgres://postgres@127.0.0.1:5432/test
 *   --anatomy-reps N                 statements/op probe repetitions (default 200; 0 skips it)
 *   --server-cpu-prof                spawned servers write .cpuprofile files (bench/results/profiles/)
 *   --schedules N                    schedules due at once in the triggers scenario (default 10000)
 *   --fire-lag-processes 1,3         baton up processes firing them, one setting after another
 *   --fire-lag-runs N                runs per setting (default 3; the table shows the median)
 *   --no-save                        print only; do not write bench/results/
 *
 * `baton worker` overhead runs only when asked (`--only worker-overhead`; bench/lib/worker-overhead.ts): per task,
 * a bare spawn of `true` vs `baton worker -- true` vs the SDK with a no-op handler, interleaved round by round on each
 * --store: --overhead-tasks N (default 300), --overhead-concurrency N (default 1), --overhead-rounds N (default 2).
 *
 * Flow control runs only when asked (`--only flow`; --flow-parts w1,key,pool,throttle, default all; e.g.
 * `--flow-parts pool` for the noisy neighbour by pool alone): W1 with keys, with pools and with both beside
 * plain W1, interleaved, in-process and over HTTP (--mode; --tasks, --agents …; --flow-shapes
 * plain,keys,pools,keys_pools; --flow-repeat N rounds, default 2; bench/lib/flow-w1.ts; --flow-statements: in-process
 * on either store, each run's most sent statements a task, counting costs SQLite's CPU), in-process the noisy
 * neighbour by key and by pool, each isolated (a key cap, or each agent's seats, one below the seats the flood
 * shares) and uncapped (fairness alone) (--flow-flood N, default 10000; --flow-quiet N quiet tasks one a second,
 * default 30; --flow-work-ms, default 20; bench/lib/flow.ts), and the throttle (--flow-throttle-tasks,
 * default 300; bench/lib/flow-throttle.ts): on PostgreSQL across three processes, on SQLite in its one
 * process (--flow-throttle-limit per second, default 20; --flow-throttle-burst, default 5). With BENCH_PG_PERF=PREFIX
 * (PostgreSQL in-process, as root), each W1 flow run records `perf record` samples of the backends serving it to
 * PREFIX-<shape>.data (BENCH_PG_PERF_G=1: with DWARF call graphs), for `perf report --sort sym`.
 *
 * The history scenario runs only when asked, because at its default size it takes
 * 10–20 minutes per store (filling 1,000,000 executions, probing, pruning half of them):
 *   npm run bench -- --only history --store sqlite --history-n 100000   # a short run
 *   npm run bench -- --only history                                     # both stores at 1,000,000
 * Options: --history-n N (default 1000000), --history-reps N (probe repetitions, default 100),
 * --history-canary-reps N (default 5), --history-schedules N (default 1000; 0 skips fire lag),
 * --history-prune-max-s S (default 600), --history-prune-idle-s S (default 15: the submit → claim probe against
 * an idle `baton up` just before the prune, the baseline of "W2 at most doubles"; 0 skips it),
 * --history-prune-probe-gap-ms MS (default 100: the pause between two of those probes), --history-no-prune, --history-prune-only (fill, then the prune phase
 * alone: no probes). Saves bench/results/history-*.json,
 * history-*.md and history-latest.md. See bench/lib/history.ts and docs/benchmarks.md.
 */
import { execSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import Database from 'better-sqlite3';
import type { StoreKind } from '../src/store/adapter.ts';
import { installCounter, probeAnatomy, type OpAnatomy } from './lib/anatomy.ts';
import { cpuMeter, perfRecord, pgBackendTicks, waitForQuiet, type CpuUse } from './lib/cpu.ts';
import { engineDriver, httpDriver, type Driver } from './lib/drivers.ts';
import { killChildren, nextPort, startServer, type RunningServer } from './lib/server.ts';
import { round } from './lib/stats.ts';
import { cleanupAllDbs, freshDb, postgresVersion, verify, type BenchDb, type Verification } from './lib/stores.ts';
import { runW1, setupAgents, type W1Config, type W1Result } from './lib/w1.ts';
import { runW2, type W2Result } from './lib/w2.ts';
import { indexUseLines, pgIndexUse } from './lib/pg-indexes.ts';
import { checkFlow, runNoisy, type FlowCheck, type NoisyConfig } from './lib/flow.ts';
import { runThrottle } from './lib/flow-throttle.ts';
import { engineAdmin, FLOW_SHAPES, httpAdmin, runFlowW1, shapedDriver, type FlowShape, type FlowW1Run } from './lib/flow-w1.ts';
import { runScenarios, scenarioRows, SCENARIOS, type Scenario, type ScenarioResults } from './lib/scenarios.ts';
import { OVERHEAD_HEAD, overheadTableRows, runWorkerOverhead } from './lib/worker-overhead.ts';
import { runUsers, USERS_HEAD, usersTableRows, type UsersRow, type UsersSystem } from './lib/users.ts';
import { cleanupHistoryDbs, HISTORY_DEFAULTS, HISTORY_HEAD, historyRows, runHistory, type HistoryResult } from './lib/history.ts';

const ROOT = fileURLToPath(new URL('../', import.meta.url));
const RESULTS = join(ROOT, 'bench', 'results');

const { values: a } = parseArgs({
  options: {
    store: { type: 'string', default: 'both' },
    only: { type: 'string' },
    mode: { type: 'string', default: 'both' },
    tasks: { type: 'string', default: '20000' },
    agents: { type: 'string', default: '100' },
    'max-parallel': { type: 'string', default: '3' },
    loops: { type: 'string', default: '50' },
    'claim-max': { type: 'string', default: '3' },
    'submit-concurrency': { type: 'string', default: '32' },
    'idle-wait-ms': { type: 'string', default: '200' },
    'submit-batch': { type: 'string', default: '1' },
    'complete-claim': { type: 'boolean', default: false },
    'warmup-tasks': { type: 'string' },
    'w2-submits': { type: 'string', default: '500' },
    'w2-warmup': { type: 'string', default: '20' },
    'w2-settle-ms': { type: 'string', default: '10' },
    'w2-agents': { type: 'string', default: '100' },
    server: { type: 'string', default: 'spawn' },
    'pg-url': { type: 'string', default: process.env.BATON_BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test' },
    'anatomy-reps': { type: 'string', default: '200' },
    'server-cpu-prof': { type: 'boolean', default: false },
    'no-save': { type: 'boolean', default: false },
    'quiet-pct': { type: 'string', default: '25' },
    'quiet-max-s': { type: 'string', default: '30' },
    scenarios: { type: 'string', default: 'worker,push,triggers,cli,bodies,backlog' },
    'worker-tasks': { type: 'string', default: '500' },
    'push-tasks': { type: 'string', default: '2000' },
    schedules: { type: 'string', default: '10000' },
    'fire-lag-processes': { type: 'string', default: '1,3' },
    'fire-lag-runs': { type: 'string', default: '3' },
    'history-n': { type: 'string', default: String(HISTORY_DEFAULTS.n) },
    'history-reps': { type: 'string', default: String(HISTORY_DEFAULTS.reps) },
    'history-canary-reps': { type: 'string', default: String(HISTORY_DEFAULTS.canaryReps) },
    'history-schedules': { type: 'string', default: String(HISTORY_DEFAULTS.schedules) },
    'history-prune-max-s': { type: 'string', default: String(HISTORY_DEFAULTS.pruneMaxS) },
    'history-prune-idle-s': { type: 'string', default: String(HISTORY_DEFAULTS.pruneIdleS) },
    'history-prune-probe-gap-ms': { type: 'string', default: String(HISTORY_DEFAULTS.pruneProbeGapMs) },
    'history-no-prune': { type: 'boolean', default: false },
    'flow-flood': { type: 'string', default: '10000' },
    'flow-quiet': { type: 'string', default: '30' },
    'flow-work-ms': { type: 'string', default: '20' },
    'flow-throttle-tasks': { type: 'string', default: '300' },
    'flow-parts': { type: 'string', default: 'w1,key,pool,throttle' },
    'flow-throttle-limit': { type: 'string', default: '20' },
    'flow-throttle-burst': { type: 'string', default: '5' },
    'flow-shapes': { type: 'string', default: FLOW_SHAPES.join(',') },
    'flow-repeat': { type: 'string', default: '2' },
    'flow-statements': { type: 'boolean', default: false },
    'history-prune-only': { type: 'boolean', default: false },
    'overhead-tasks': { type: 'string', default: '300' },
    'overhead-concurrency': { type: 'string', default: '1' },
    'overhead-rounds': { type: 'string', default: '2' },
    'users-systems': { type: 'string', default: 'baton-sdk,baton-hand,bullmq,graphile' },
    'users-w2-submits': { type: 'string', default: '300' },
    'users-in-flight': { type: 'string', default: '32' },
    'users-workloads': { type: 'string', default: 'w1,w2' },
    'graphile-concurrency': { type: 'string', default: '16' },
    'redis-url': { type: 'string', default: process.env.BATON_BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379' },
    'redis-prefix': { type: 'string', default: 'baton-bench' },
  },
  strict: true,
});

function choice<T extends string>(name: string, value: string | undefined, allowed: readonly T[]): T[] {
  if (value === undefined || value === 'both') return [...allowed];
  if (!(allowed as readonly string[]).includes(value)) throw new Error(`--${name} must be one of ${allowed.join(', ')}, or both`);
  return [value as T];
}
function int(name: string, value: string | undefined, min = 0): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < min) throw new Error(`--${name} must be an integer ≥ ${min} (got '${value}')`);
  return n;
}

const stores = choice<StoreKind>('store', a.store, ['sqlite', 'postgres']);
const historyOnly = a.only === 'history';
const flowOnly = a.only === 'flow';
const overheadOnly = a.only === 'worker-overhead';
// --only scenarios: just the scenarios (e.g. `--only scenarios --scenarios cli --anatomy-reps 0`).
const workloads =
  historyOnly || flowOnly || overheadOnly || a.only === 'scenarios' || a.only === 'users'
    ? []
    : choice('only', a.only, ['w1', 'w2'] as const);
// The users' shape (bench/lib/users.ts) runs in the default run and with --only users.
const usersShape = a.only === undefined || a.only === 'both' || a.only === 'users';
const scenarios: Scenario[] =
  a.scenarios === 'none'
    ? []
    : a.scenarios!.split(',').map((s) => {
        if (!(SCENARIOS as readonly string[]).includes(s)) throw new Error(`--scenarios takes ${SCENARIOS.join(',')} or none`);
        return s as Scenario;
      });
const scenarioResults: Partial<Record<StoreKind, ScenarioResults | { error: string }>> = {};
const modes = choice('mode', a.mode, ['http', 'inproc'] as const);
const serverHow = choice('server', a.server, ['spawn', 'inproc'] as const)[0]!;
if (a.server === 'both') throw new Error('--server must be spawn or inproc');
const pgUrl = a['pg-url']!;
const flowParts = a['flow-parts']!.split(',').flatMap((p) => choice('flow-parts', p, ['w1', 'key', 'pool', 'throttle'] as const));
const flowShapes = a['flow-shapes']!.split(',').map((p) => {
  if (!(FLOW_SHAPES as readonly string[]).includes(p)) throw new Error(`--flow-shapes takes ${FLOW_SHAPES.join(',')}`);
  return p as FlowShape;
});
const flowRepeat = int('flow-repeat', a['flow-repeat'], 1);
const tasks = int('tasks', a.tasks, 1);
const w1: Omit<W1Config, 'agentPrefix' | 'tasks'> = {
  agents: int('agents', a.agents, 1),
  maxParallel: int('max-parallel', a['max-parallel'], 1),
  loops: int('loops', a.loops, 1),
  claimMax: int('claim-max', a['claim-max'], 1),
  submitConcurrency: int('submit-concurrency', a['submit-concurrency'], 1),
  idleWaitMs: int('idle-wait-ms', a['idle-wait-ms'], 0),
  submitBatch: int('submit-batch', a['submit-batch'], 1),
  completeClaim: a['complete-claim'] === true,
};
const warmupTasks =
  a['warmup-tasks'] !== undefined ? int('warmup-tasks', a['warmup-tasks']) : Math.min(2000, Math.max(200, Math.floor(tasks / 10)));
const w2cfg = {
  submits: int('w2-submits', a['w2-submits'], 1),
  warmup: int('w2-warmup', a['w2-warmup']),
  settleMs: int('w2-settle-ms', a['w2-settle-ms']),
  spread: int('w2-agents', a['w2-agents'], 1),
};
const anatomyReps = int('anatomy-reps', a['anatomy-reps']);
const quietPct = int('quiet-pct', a['quiet-pct']);
const quietMaxMs = int('quiet-max-s', a['quiet-max-s']) * 1000;
type Mode = 'http' | 'inproc';
/** The targets, per store and way in: W1 tasks/s at least, W2 p50 ms at most. */
const TARGETS = {
  w1: { sqlite: { inproc: 10_000, http: 3_000 }, postgres: { inproc: 3_000, http: 1_600 } } as Record<StoreKind, Record<Mode, number>>,
  w2: { sqlite: { inproc: 1, http: 2 }, postgres: { inproc: 3, http: 4 } } as Record<StoreKind, Record<Mode, number>>,
};

// ── environment ──────────────────────────────────────────────────────────────

function sh(cmd: string): string | null {
  try {
    return execSync(cmd, { cwd: ROOT, stdio: ['ignore', 'pipe', 'ignore'] })
      .toString()
      .trim();
  } catch {
    return null;
  }
}
const sqliteVersion = (() => {
  const d = new Database(':memory:');
  const v = (d.prepare('select sqlite_version() as v').get() as { v: string }).v;
  d.close();
  return v;
})();
const startedAt = new Date();
const env = {
  date: startedAt.toISOString(),
  node: process.version,
  platform: `${process.platform} ${process.arch}`,
  cpu: `${cpus().length} × ${cpus()[0]?.model ?? 'unknown'}`,
  memory_gb: round(totalmem() / 2 ** 30, 1),
  git_commit: sh('git rev-parse --short HEAD'),
  git_dirty: (sh('git status --porcelain -- src package.json') ?? '') !== '',
  sqlite: sqliteVersion,
  postgres: null as string | null,
};

// ── cleanup on interrupt ─────────────────────────────────────────────────────

let interrupted = false;
for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.on(sig, () => {
    if (interrupted) process.exit(130);
    interrupted = true;
    console.error(`\n${sig}: stopping servers and dropping benchmark databases…`);
    killChildren();
    Promise.all([cleanupAllDbs(), cleanupHistoryDbs()]).finally(() => process.exit(130));
  });
}

// ── phases ───────────────────────────────────────────────────────────────────

interface Row {
  store: StoreKind;
  workload: 'w1' | 'w2';
  mode: 'http' | 'inproc';
  /** W2: the agents its submits were spread over, each with its own parked claim. */
  agents?: number;
  /** Machine busy % (all cores) in the second before the phase started. */
  busy_before_pct?: number | null;
  /** CPU used during the measured part of the phase. */
  cpu?: CpuUse;
  w1?: W1Result & { warmup_tasks: number; verification: Verification };
  w2?: W2Result;
  /** W1 in-process on PostgreSQL: statements sent by kind, and transactions (START, or a statement alone). */
  statements?: { by_kind: Record<string, number>; transactions: number };
  error?: string;
}
const rows: Row[] = [];
const anatomy: Partial<Record<StoreKind, OpAnatomy[]>> = {};

const log = (msg: string) => process.stderr.write(`${msg}\n`);

interface Ctx {
  driver: Driver;
  db: BenchDb;
  /** The process serving requests (this one for in-process runs). */
  serverPid: number;
  /** The server, over HTTP. */
  server?: RunningServer;
}

/** Runs `fn` with a driver on a fresh database, then tears everything down (then `after`, on the closed database). */
async function withDriver<T>(
  store: StoreKind,
  mode: 'http' | 'inproc',
  label: string,
  fn: (c: Ctx) => Promise<T>,
  after?: (db: BenchDb) => Promise<void>,
): Promise<T> {
  const db = freshDb(store, pgUrl, label);
  let server: RunningServer | undefined;
  let driver: Driver | undefined;
  let closeStore: (() => Promise<void>) | undefined;
  try {
    if (mode === 'http') {
      const profDir = a['server-cpu-prof']
        ? join(RESULTS, 'profiles', `${startedAt.toISOString().replace(/[:.]/g, '-')}-${label}`)
        : undefined;
      if (profDir) mkdirSync(profDir, { recursive: true });
      server = await startServer(db, serverHow, { cpuProfDir: profDir, port: nextPort() });
      driver = httpDriver(server.url, server.key);
    } else {
      const s = await db.open();
      closeStore = () => s.close();
      driver = engineDriver(s);
    }
    const out = await fn({ driver, db, serverPid: server?.pid ?? process.pid, server });
    await driver.close();
    driver = undefined;
    await server?.stop();
    server = undefined;
    await closeStore?.();
    closeStore = undefined;
    await after?.(db);
    return out;
  } finally {
    await driver?.close().catch(() => {});
    await server?.stop().catch(() => {});
    await closeStore?.().catch(() => {});
    await db.cleanup().catch((err) => log(`  cleanup failed: ${err?.message ?? err}`));
  }
}

/** CPU accounting for a measured part; on PostgreSQL also the backends serving our connections. */
async function meterFor(store: StoreKind, serverPid: number): Promise<{ stop(): Promise<CpuUse> }> {
  const pids = [...new Set([process.pid, serverPid])];
  const before = store === 'postgres' ? await pgBackendTicks(pgUrl, pids) : undefined;
  const meter = cpuMeter(serverPid);
  return {
    async stop() {
      const after = store === 'postgres' ? await pgBackendTicks(pgUrl, pids) : undefined;
      return meter.stop(before, after);
    },
  };
}

async function phaseW1(store: StoreKind, mode: 'http' | 'inproc'): Promise<Row> {
  const row: Row = { store, workload: 'w1', mode };
  let verification: Verification | undefined;
  const result = await withDriver(
    store,
    mode,
    `w1_${mode}`,
    async ({ driver, serverPid }) => {
      const cfg: W1Config = { ...w1, tasks, agentPrefix: 'w1-' };
      const agents = await setupAgents(driver, cfg, tasks);
      if (warmupTasks > 0) {
        const warmAgents = await setupAgents(
          driver,
          { ...cfg, agents: Math.min(cfg.loops, cfg.agents), agentPrefix: 'warm-' },
          warmupTasks,
        );
        await runW1(driver, { ...cfg, tasks: warmupTasks, agentPrefix: 'warm-' }, warmAgents);
      }
      const meter = await meterFor(store, serverPid);
      // In-process on PostgreSQL the statements the engine sends are counted here (statements
      // per task); a spawned server's are not visible to this process.
      const counter = store === 'postgres' && mode === 'inproc' ? installCounter() : undefined;
      counter?.take();
      counter?.takeTransactions();
      try {
        const r = await runW1(driver, cfg, agents);
        row.cpu = await meter.stop();
        if (counter) {
          const byKind = counter.take();
          row.statements = { by_kind: byKind, transactions: counter.takeTransactions() };
        }
        return r;
      } finally {
        counter?.uninstall();
      }
    },
    async (db) => {
      // Read back what really happened, from the database, after the server stopped.
      const s = await db.open({ poolMax: 2 });
      try {
        verification = await verify(s, 'w1-');
      } finally {
        await s.close();
      }
    },
  );
  row.w1 = { ...result, warmup_tasks: warmupTasks, verification: verification! };
  return row;
}

async function phaseW2(store: StoreKind, mode: 'http' | 'inproc', agents: number): Promise<Row> {
  const row: Row = { store, workload: 'w2', mode, agents };
  row.w2 = await withDriver(store, mode, `w2_${mode}`, async ({ driver, serverPid }) => {
    const meter = await meterFor(store, serverPid);
    const r = await runW2(driver, { ...w2cfg, agent: 'w2', agents });
    row.cpu = await meter.stop();
    return r;
  });
  return row;
}

// ── output ───────────────────────────────────────────────────────────────────

const fmt = (n: number | undefined, d = 0) =>
  n === undefined || Number.isNaN(n) ? '' : n.toLocaleString('en-US', { minimumFractionDigits: d, maximumFractionDigits: d });
const VIA = { http: 'HTTP', inproc: 'in-process' };

function tableRows(): string[][] {
  const out: string[][] = [];
  for (const r of rows) {
    const base = [r.store, workloadLabel(r), VIA[r.mode]];
    const c = r.cpu;
    const opt = (x: number | null | undefined, none: string) => (x === null || x === undefined ? none : fmt(x, 1));
    const cpu = c
      ? `${fmt(c.bench_s, 1)} / ${opt(c.server_s, '–')} / ${r.store === 'postgres' ? opt(c.postgres_s, '?') : '–'} / ${opt(c.other_s, '?')}`
      : '';
    if (r.error) {
      out.push([...base, 'ERROR', '', '', '', '', '', '', r.error.split('\n')[0]!.slice(0, 80)]);
    } else if (r.w1) {
      const t = TARGETS.w1[r.store][r.mode];
      const v = r.w1.verification;
      const ok = v.by_status.succeeded === r.w1.tasks && v.over_admissions === 0 && v.redelivered === 0;
      out.push([
        ...base,
        fmt(r.w1.tasks_per_s),
        fmt(r.w1.submits_per_s),
        '',
        '',
        '',
        cpu,
        `≥ ${fmt(t)} tasks/s ${r.w1.tasks_per_s >= t ? 'met' : 'MISSED'}`,
        `${fmt(r.w1.tasks)} tasks in ${fmt(r.w1.seconds, 2)} s; ${fmt(r.w1.tasks_per_claim, 2)} tasks/claim, ${fmt(r.w1.empty_claims)} empty claims, ${fmt(r.w1.requests / r.w1.tasks, 2)} requests/task; ${statementsPerTask(r)}${perTask(r)}${ok ? `verified: all succeeded once, max seats ${v.max_seats_in_use}` : `VERIFY FAILED ${JSON.stringify(v)}`}`,
      ]);
    } else if (r.w2) {
      const t = TARGETS.w2[r.store][r.mode];
      out.push([
        ...base,
        '',
        '',
        fmt(r.w2.wake.p50, 2),
        fmt(r.w2.wake.p95, 2),
        fmt(r.w2.wake.p99, 2),
        cpu,
        `p50 ≤ ${t} ms ${r.w2.wake.p50 <= t ? 'met' : 'MISSED'}`,
        `${r.w2.submits} submits${r.w2.agents > 1 ? ` over ${r.w2.agents} agents, each with its own parked claim` : ''}; submit call p50 ${fmt(r.w2.submit_call.p50, 2)} ms${r.w2.submit_back_to_back ? ` (back to back ${fmt(r.w2.submit_back_to_back.p50, 2)} ms)` : ''}; wake max ${fmt(r.w2.wake.max, 2)} ms`,
      ]);
    }
  }
  return out;
}
/** W1, W2 (one agent) or W2×N (spread over N agents). */
function workloadLabel(r: Row): string {
  return r.workload === 'w2' && (r.agents ?? 1) > 1 ? `W2×${r.agents}` : r.workload.toUpperCase();
}
/** Statements and transactions per task (W1 in-process, PostgreSQL), with the kinds that make them. */
function statementsPerTask(r: Row): string {
  if (!r.statements || !r.w1) return '';
  const per = (n: number) => fmt(n / r.w1!.tasks, 2);
  const kinds = Object.entries(r.statements.by_kind)
    .sort((a, b) => b[1] - a[1])
    .map(([k, n]) => `${k} ${per(n)}`)
    .join(', ');
  const total = Object.values(r.statements.by_kind).reduce((a, b) => a + b, 0);
  return `statements/task ${per(total)} (${kinds}) in ${per(r.statements.transactions)} transactions; `;
}
/** CPU milliseconds per task: comparable across runs even when other jobs shared the machine. */
function perTask(r: Row): string {
  const c = r.cpu;
  if (!c || !r.w1) return '';
  const ms = (s: number) => fmt((1000 * s) / r.w1!.tasks, 2);
  const pgPart = c.postgres_s !== undefined && c.postgres_s !== null ? `, PostgreSQL ${ms(c.postgres_s)} ms` : '';
  return c.server_s === null
    ? `CPU/task: in-process ${ms(c.bench_s)} ms${pgPart}; `
    : `CPU/task: server ${ms(c.server_s)} ms, load gen ${ms(c.bench_s)} ms${pgPart}; `;
}
const HEAD = [
  'store',
  'workload',
  'via',
  'tasks/s',
  'submits/s',
  'p50 ms',
  'p95 ms',
  'p99 ms',
  'CPU s gen/srv/pg/other',
  'target',
  'notes',
];
const NUMERIC = new Set([3, 4, 5, 6, 7, 8]);

function textTable(head: string[], body: string[][]): string {
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((r) => (r[i] ?? '').length)));
  const line = (r: string[]) =>
    r
      .map((c, i) => (NUMERIC.has(i) && head === HEAD ? c.padStart(widths[i]!) : c.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(head), widths.map((w) => '-'.repeat(w)).join('  '), ...body.map(line)].join('\n');
}
function mdTable(head: string[], body: string[][]): string {
  const esc = (c: string) => c.replace(/\|/g, '\\|');
  return [
    `| ${head.join(' | ')} |`,
    `|${head.map((_, i) => (NUMERIC.has(i) && head === HEAD ? '---:' : '---')).join('|')}|`,
    ...body.map((r) => `| ${r.map(esc).join(' | ')} |`),
  ].join('\n');
}

function describeSetup(): string[] {
  const lines = [
    `Baton engine benchmark — ${env.date} — node ${env.node}, ${env.cpu}, SQLite ${env.sqlite}${env.postgres ? `, PostgreSQL ${env.postgres}` : ''}, git ${env.git_commit}${env.git_dirty ? ' (src has uncommitted changes)' : ''}`,
  ];
  if (workloads.includes('w1')) {
    lines.push(
      `W1: ${fmt(tasks)} no-op tasks round-robin over ${w1.agents} agents (max_parallel ${w1.maxParallel}, max_backlog ${fmt(tasks)}), measured from the first submit to the last completion.`,
      `    Submit driver: ${w1.submitConcurrency} submits in flight (each awaits its answer, then takes the next task), running concurrently with`,
      `    ${w1.loops} claim loops in the same process; loop k serves agents k, k+${w1.loops}, … round robin: claim max ${w1.claimMax} with wait 0, complete what it got`,
      `    (concurrently), next agent; after a whole empty round it long-polls ${w1.idleWaitMs} ms. Warm-up first: ${fmt(warmupTasks)} tasks on separate agents, not measured.`,
    );
  }
  if (workloads.includes('w2')) {
    lines.push(
      `W2: idle system, ${w2cfg.submits} sequential submits (+${w2cfg.warmup} warm-up) to one agent; one claim loop long-polls it (wait 30 s); each submit ${w2cfg.settleMs} ms after the claim was re-issued.`,
      `    Latency = just before the submit call → the claim call returns the task.`,
      ...(w2cfg.spread > 1
        ? [
            `W2×${w2cfg.spread}: the same, the submits round robin over ${w2cfg.spread} agents, each long-polled by its own claim loop: ${w2cfg.spread - 1} claims stay parked while each submit wakes its own agent's.`,
          ]
        : []),
    );
  }
  if (modes.includes('http')) {
    lines.push(
      serverHow === 'spawn'
        ? `HTTP: server is \`baton up\` from dist/ (the compiled JavaScript an installed package runs; BENCH_SERVER_TSX=1: bin/baton.js through tsx) in its own OS process (BATON_PORT=0, fresh BATON_DATA_DIR / BATON_PG_SCHEMA); load generator = BatonClient over node:http (keep-alive; src/worker/http.ts, as the SDK and CLI send) in this process.`
        : `HTTP: server is startNode() in this same process (shares the load generator's event loop); load generator = BatonClient over node:http.`,
    );
  }
  if (modes.includes('inproc'))
    lines.push(
      `In-process: new Engine({store}) in this process, engine.submit / claim / complete; default store options (PostgreSQL pool max 10).`,
    );
  lines.push(
    `Each (store, workload, via) runs on a fresh database: new SQLite file in a temp dir, or a new PostgreSQL schema; all dropped afterwards.`,
  );
  lines.push(
    `CPU s gen/srv/pg/other: CPU seconds used during the measured part by this process (load generator; for in-process runs, everything), the server process, the PostgreSQL backends serving them, and the rest of the machine (other jobs: the machine is shared).`,
  );
  return lines;
}

function anatomyText(md: boolean): string {
  const out: string[] = [];
  for (const [store, ops] of Object.entries(anatomy)) {
    if (!ops) continue;
    const pgCol = ops.some((o) => o.postgres_cpu_ms !== undefined);
    const head = [
      'store',
      'operation (in-process, alone)',
      'statements',
      'mean ms',
      ...(pgCol ? ['PostgreSQL CPU ms'] : []),
      'statements by kind',
    ];
    const body = ops.map((o) => [
      store,
      o.op,
      fmt(o.statements, 1),
      fmt(o.mean_ms, 3),
      ...(pgCol ? [o.postgres_cpu_ms === null || o.postgres_cpu_ms === undefined ? '?' : fmt(o.postgres_cpu_ms, 2)] : []),
      Object.entries(o.by_kind)
        .map(([k, v]) => `${k} ${v}`)
        .join(', '),
    ]);
    out.push(md ? mdTable(head, body) : textTable(head, body));
  }
  return out.join(md ? '\n\n' : '\n\n');
}

const USERS_SETUP = `The users' shape (bench/lib/users.ts): W1-users, ${tasks.toLocaleString('en-US')} no-op tasks over ${w1.agents} agents capped at ${w1.maxParallel}, one producer doing single submits with ${a['users-in-flight']} in flight, one worker process serving every agent; W2-users, an idle system, sequential submits over ${w1.agents} agents each with a waiting worker, start = the worker's handler began. Peers in the same run.`;

// ── main ─────────────────────────────────────────────────────────────────────

async function mainHistory(): Promise<void> {
  const t0 = Date.now();
  if (stores.includes('postgres')) {
    try {
      env.postgres = await postgresVersion(pgUrl);
    } catch (err: any) {
      log(`PostgreSQL at ${pgUrl} is not reachable (${err?.message ?? err}); its rows will show the error.`);
    }
  }
  const n = int('history-n', a['history-n'], 1);
  const results: HistoryResult[] = [];
  for (const store of stores) {
    if (interrupted) return;
    if (store === 'postgres' && !env.postgres) {
      results.push({ store, n, error: `PostgreSQL not reachable at ${pgUrl}` });
      continue;
    }
    results.push(
      await runHistory({
        store,
        pgUrl,
        n,
        reps: int('history-reps', a['history-reps'], 1),
        canaryReps: int('history-canary-reps', a['history-canary-reps'], 1),
        schedules: int('history-schedules', a['history-schedules']),
        pruneMaxS: int('history-prune-max-s', a['history-prune-max-s'], 1),
        pruneIdleS: int('history-prune-idle-s', a['history-prune-idle-s']),
        pruneProbeGapMs: int('history-prune-probe-gap-ms', a['history-prune-probe-gap-ms']),
        noPrune: a['history-no-prune']!,
        pruneOnly: a['history-prune-only']!,
        // On a shared machine, the scenario's servers stay in BATON_TEST_PORTS (it takes up to 80 ports from its start).
        ...(/^\d+-\d+$/.test(process.env.BATON_TEST_PORTS ?? '') ? { basePort: Number(process.env.BATON_TEST_PORTS!.split('-')[0]) } : {}),
        log,
      }),
    );
  }
  // BENCH_GIT describes the code when the bench runs from a copy of the tree without .git.
  const gitDirty = (sh('git status --porcelain') ?? '') !== '';
  const codeVersion = process.env.BENCH_GIT ?? `${env.git_commit}${gitDirty ? ' with uncommitted work in progress' : ''}`;
  const setup = [
    `Baton history benchmark — ${env.date} — node ${env.node}, ${env.cpu}, SQLite ${env.sqlite}${env.postgres ? `, PostgreSQL ${env.postgres}` : ''}, git ${codeVersion}`,
    `N = ${n.toLocaleString('en-US')} past executions (fast path: bench/lib/history-fill.ts) over 35 days and 100 agents; the same probes on the empty store and at N, each against its own \`baton up\` process over HTTP.`,
    `Probes: sequential repetitions (${a['history-reps']} each; metrics ${HISTORY_DEFAULTS.metricsReps}, canary ${a['history-canary-reps']}); ratio = p50 at N / p50 empty. Worst /healthz: a loop pinging every ~10 ms during the metrics scrapes, the canary cycles, and the prune.`,
    `Prune: \`baton up\` with BATON_RETENTION_DAYS=17 removes the executions completed more than 17 days ago (about half).`,
  ];
  const body = results.flatMap(historyRows);
  const text = [...setup, '', textTable(HISTORY_HEAD, body)].join('\n');
  process.stdout.write(`\n${text}\n\nTotal ${((Date.now() - t0) / 1000).toFixed(0)} s.\n`);
  if (!a['no-save']) {
    mkdirSync(RESULTS, { recursive: true });
    const stamp = startedAt
      .toISOString()
      .replace(/\.\d+Z$/, 'Z')
      .replace(/:/g, '-');
    const jsonName = `history-${stamp}.json`;
    writeFileSync(
      join(RESULTS, jsonName),
      JSON.stringify(
        {
          env: { ...env, git_dirty: gitDirty, code_version: codeVersion },
          options: { stores, n, argv: process.argv.slice(2) },
          setup,
          results,
        },
        null,
        2,
      ) + '\n',
    );
    const md = [
      '# Baton history benchmark',
      '',
      `Command: \`npm run bench${process.argv.length > 2 ? ' -- ' + process.argv.slice(2).join(' ') : ''}\` · full data: [${jsonName}](./${jsonName})`,
      '',
      ...setup.map((l) => `- ${l}`),
      '',
      mdTable(HISTORY_HEAD, body),
      '',
    ].join('\n');
    writeFileSync(join(RESULTS, `history-${stamp}.md`), md);
    writeFileSync(join(RESULTS, 'history-latest.md'), md);
    process.stdout.write(`Saved bench/results/${jsonName}, history-${stamp}.md and history-latest.md\n`);
  }
}

// ── flow control (--only flow) ──────────────────────────────────────────────

/** W1 in one flow shape (bench/lib/flow-w1.ts) on a fresh database, then the run's check. */
async function phaseW1Flow(store: StoreKind, mode: Mode, shape: FlowShape): Promise<FlowW1Run> {
  let check: FlowCheck | undefined;
  const r = await withDriver(
    store,
    mode,
    `w1_${shape}_${mode}`,
    async ({ driver: base, server }) => {
      const admin = server ? httpAdmin(server.url, server.key) : engineAdmin((base as ReturnType<typeof engineDriver>).engine);
      const driver = await shapedDriver(admin, base, w1.agents, shape);
      const cfg: W1Config = { ...w1, submitBatch: 1, tasks, agentPrefix: 'w1-' };
      const agents = await setupAgents(driver, cfg, tasks);
      // In-process on PostgreSQL (on SQLite too with --flow-statements): the statements and
      // transactions the engine sends, per task.
      const counter = mode === 'inproc' && (store === 'postgres' || a['flow-statements']) ? installCounter() : undefined;
      counter?.take();
      counter?.takeTransactions();
      counter?.takeTexts();
      // In-process, the process's CPU a task (every thread: the engine, SQLite and its readers): on
      // a shared machine it moves with the work done, where tasks a second move with the load too.
      // In-process on PostgreSQL, the CPU of the backends serving this process too (the other half
      // of what a task costs on one machine).
      const backends = () => (mode === 'inproc' && store === 'postgres' ? pgBackendTicks(pgUrl, [process.pid]) : undefined);
      // BENCH_PG_INDEXES=1 (in-process on PostgreSQL): what each index of executions did in the run.
      const engineDb =
        mode === 'inproc' && store === 'postgres' && process.env.BENCH_PG_INDEXES
          ? (base as ReturnType<typeof engineDriver>).engine.store.db
          : undefined;
      const ixBefore = engineDb ? await pgIndexUse(engineDb) : undefined;
      const pgBefore = await backends();
      const perf = pgBefore ? perfRecord(process.env.BENCH_PG_PERF, shape, [...pgBefore.keys()]) : undefined;
      const cpu = process.cpuUsage();
      try {
        const run = await runW1(driver, cfg, agents);
        const used = process.cpuUsage(cpu);
        await perf?.();
        const pgAfter = await backends();
        if (engineDb && ixBefore) {
          log(`  ${shape}: executions' indexes in the run`);
          for (const l of indexUseLines(ixBefore, await pgIndexUse(engineDb), tasks)) log(l);
        }
        let w: Omit<FlowW1Run, 'check'> =
          mode === 'inproc' ? { ...run, cpu_us_per_task: round((used.user + used.system) / tasks, 1) } : run;
        if (pgAfter && pgAfter.size > 0) {
          let ticks = 0;
          for (const [pid, t] of pgAfter) ticks += t - (pgBefore?.get(pid) ?? 0);
          w = { ...w, pg_cpu_us_per_task: round((ticks * 10_000) / tasks, 1) };
        }
        if (!counter) return w;
        const statements = Object.values(counter.take()).reduce((x, y) => x + y, 0);
        if (a['flow-statements']) {
          const most = Object.entries(counter.takeTexts()).sort((x, y) => y[1] - x[1]);
          log(`  ${shape}: statements a task, most sent first`);
          for (const [text, n] of most.slice(0, 25)) log(`    ${(n / tasks).toFixed(4)}  ${text}`);
        }
        return {
          ...w,
          statements_per_task: round(statements / tasks, 3),
          transactions_per_task: round(counter.takeTransactions() / tasks, 3),
        };
      } finally {
        counter?.uninstall();
      }
    },
    async (db) => {
      const s = await db.open({ poolMax: 2 });
      try {
        check = await checkFlow(s, 'w1-');
      } finally {
        await s.close();
      }
    },
  );
  return { ...r, check: check! };
}

async function mainOverhead(): Promise<void> {
  const rows = await runWorkerOverhead(stores, {
    tasks: int('overhead-tasks', a['overhead-tasks'], 1),
    concurrency: int('overhead-concurrency', a['overhead-concurrency'], 1),
    rounds: int('overhead-rounds', a['overhead-rounds'], 1),
    pgUrl,
    log,
  });
  const setup = `\`baton worker\` overhead — ${env.date} — node ${env.node}, ${env.cpu}, git ${env.git_commit}; ${a['overhead-tasks']} tasks a round, concurrency ${a['overhead-concurrency']}, ways interleaved round by round`;
  process.stdout.write(`\n${setup}\n\n${textTable(OVERHEAD_HEAD, overheadTableRows(rows))}\n`);
  if (!a['no-save']) {
    mkdirSync(RESULTS, { recursive: true });
    const stamp = startedAt
      .toISOString()
      .replace(/\.\d+Z$/, 'Z')
      .replace(/:/g, '-');
    writeFileSync(join(RESULTS, `worker-overhead-${stamp}.json`), JSON.stringify({ env, setup, rows }, null, 2) + '\n');
    process.stdout.write(`Saved bench/results/worker-overhead-${stamp}.json\n`);
  }
}

const NOISY_ISOLATED = {
  key: "isolated: key_max_parallel one below the agent's seats",
  pool: "isolated: each agent's max_parallel one below the pool's",
} as const;

async function mainFlow(): Promise<void> {
  if (stores.includes('postgres')) env.postgres = await postgresVersion(pgUrl);
  const noisy: NoisyConfig = {
    flood: int('flow-flood', a['flow-flood'], 1),
    quiet: int('flow-quiet', a['flow-quiet'], 1),
    workMs: int('flow-work-ms', a['flow-work-ms']),
    loops: 4,
    maxParallel: 4,
  };
  const out: Record<string, unknown>[] = [];
  const lines: string[] = [];
  const ok = (c: FlowCheck) => (c.ok ? 'check ok' : `CHECK FAILED ${JSON.stringify(c)}`);
  for (const store of stores) {
    if (flowParts.includes('w1')) {
      const w = await runFlowW1(modes, flowShapes, flowRepeat, (mode, shape) => phaseW1Flow(store, mode, shape), log);
      out.push({ store, workload: 'w1_flow', ...w });
      for (const x of w.summaries.filter((x) => x.shape !== 'plain')) {
        lines.push(
          `${store} W1 ${VIA[x.mode]} with ${x.shape}: ${x.median_ratio}× plain (median of ${x.ratios.join(', ')}; ≥ 0.8 ${x.median_ratio >= 0.8 ? 'met' : 'MISSED'})${x.cpu_ratios ? `; CPU a task ${x.cpu_ratios.join(', ')}× plain's` : ''}; ${x.checks_ok ? 'checks ok' : 'CHECK FAILED'}`,
        );
        log(lines[lines.length - 1]!);
      }
    }
    const noisyRuns = (['key', 'pool'] as const)
      .filter((x) => flowParts.includes(x))
      .flatMap((shape) => (['isolated', 'uncapped'] as const).map((configuration) => ({ shape, configuration })));
    for (const { shape, configuration } of noisyRuns) {
      const r = await runNoisy(
        async (label) => {
          const d = freshDb(store, pgUrl, label);
          const s = await d.open();
          return { store: s, done: async () => (await s.close(), await d.cleanup()) };
        },
        shape,
        configuration,
        noisy,
      );
      out.push({ store, workload: `noisy_${shape}_${configuration}`, ...r });
      const how = configuration === 'isolated' ? NOISY_ISOLATED[shape] : 'uncapped, fairness alone: B waits at most one turn';
      lines.push(
        `${store} noisy neighbour (${shape}, ${how}): B p99 wait ${fmt(r.with_flood.p99, 1)} ms with a ${fmt(r.flood)}-task flood vs ${fmt(r.alone.p99, 1)} ms alone = ${r.ratio_p99}× (≤ 2 ${r.ratio_p99 <= 2 ? 'met' : 'MISSED'}); p50 ${fmt(r.with_flood.p50, 1)} / ${fmt(r.alone.p50, 1)} ms, max ${fmt(r.with_flood.max, 1)} ms; flood queued at the end ${fmt(r.flood_queued_at_end)}; longest waits ${r.longest.join(', ')} ms, event loop's longest delay ${fmt(r.loop_delay_max_ms, 1)} ms${r.wal_holds === null ? '' : `, ${r.wal_holds} WAL checkpoint(s) holding the writer`}; ${ok(r.check)}`,
      );
      log(lines[lines.length - 1]!);
    }
    if (flowParts.includes('throttle')) {
      const db = freshDb(store, pgUrl, 'throttle');
      try {
        const s = await db.open();
        try {
          const r = await runThrottle(s, db.env, {
            throttle: {
              limit: int('flow-throttle-limit', a['flow-throttle-limit'], 1),
              period_seconds: 1,
              burst: int('flow-throttle-burst', a['flow-throttle-burst']),
            },
            tasks: int('flow-throttle-tasks', a['flow-throttle-tasks'], 1),
            processes: 3,
            loopsPerProcess: 2,
          });
          out.push({ workload: 'throttle', ...r });
          const ms = (x: { p50: number; p99: number; max: number }) =>
            `p50 ${fmt(x.p50, 1)} / p99 ${fmt(x.p99, 1)} / max ${fmt(x.max, 1)} ms`;
          lines.push(
            `${store} throttle ${r.throttle.limit}/${r.throttle.period_seconds}s burst ${r.throttle.burst}, ${r.processes} process(es): max ${r.max_starts_per_window} starts per window (bound ${r.bound}: ${r.max_starts_per_window <= r.bound ? 'met' : 'MISSED'}); start after allowed ${ms(r.open_to_start_ms)} (${r.late_over_50ms} of ${r.tasks} over 50 ms), ${fmt(r.starts_per_s, 1)} starts/s; with a claim parked at the allowed time ${ms(r.parked_open_to_start_ms)} (${r.parked_late_over_50ms} of ${r.parked_starts} over 50 ms); worker got it after allowed ${ms(r.open_to_worker_ms)}; look ${ms(r.look_ms)}, ${r.empty_looks} of ${r.looks} empty; reopening timer ended after the reopening ${ms(r.timer_fire_after_reopen_ms)}; late causes ${JSON.stringify(r.late_causes)}; by process ${JSON.stringify(r.starts_by_process)}; clocks ${JSON.stringify(r.clocks)}; ${ok(r.check)}`,
          );
          log(lines[lines.length - 1]!);
        } finally {
          await s.close();
        }
      } finally {
        await db.cleanup();
      }
    }
  }
  const text = [`Baton flow-control benchmark — ${env.date} — node ${env.node}, ${env.cpu}, git ${env.git_commit}`, ...lines].join('\n');
  process.stdout.write(`\n${text}\n`);
  if (!a['no-save']) {
    mkdirSync(RESULTS, { recursive: true });
    const name = `flow-${startedAt
      .toISOString()
      .replace(/\.\d+Z$/, 'Z')
      .replace(/:/g, '-')}.json`;
    writeFileSync(join(RESULTS, name), JSON.stringify({ env, argv: process.argv.slice(2), results: out }, null, 2) + '\n');
    process.stdout.write(`Saved bench/results/${name}\n`);
  }
}

async function main(): Promise<void> {
  if (historyOnly) return mainHistory();
  if (flowOnly) return mainFlow();
  if (overheadOnly) return mainOverhead();
  const t0 = Date.now();
  if (stores.includes('postgres')) {
    try {
      env.postgres = await postgresVersion(pgUrl);
    } catch (err: any) {
      log(`PostgreSQL at ${pgUrl} is not reachable (${err?.message ?? err}); its rows will show the error.`);
    }
  }
  for (const store of stores) {
    const phases = workloads.flatMap((w): { w: 'w1' | 'w2'; agents?: number }[] =>
      w === 'w1' ? [{ w }] : [1, w2cfg.spread].filter((n, i) => i === 0 || n > 1).map((agents) => ({ w, agents })),
    );
    for (const { w, agents } of phases) {
      for (const mode of modes) {
        if (interrupted) return;
        log(`▶ ${store} ${workloadLabel({ store, workload: w, mode, agents })} ${VIA[mode]} …`);
        const busyBefore = await waitForQuiet(quietPct, quietMaxMs, (b) =>
          log(`  machine busy ${b}% (other jobs?); waiting for it to calm down…`),
        );
        const started = Date.now();
        try {
          if (store === 'postgres' && !env.postgres) throw new Error(`PostgreSQL not reachable at ${pgUrl}`);
          const row = w === 'w1' ? await phaseW1(store, mode) : await phaseW2(store, mode, agents ?? 1);
          row.busy_before_pct = busyBefore;
          rows.push(row);
          if (row.w1)
            log(
              `  ${fmt(row.w1.tasks_per_s)} tasks/s, submits ${fmt(row.w1.submits_per_s)}/s (${((Date.now() - started) / 1000).toFixed(1)} s)`,
            );
          if (row.w2)
            log(
              `  p50 ${fmt(row.w2.wake.p50, 2)} ms, p95 ${fmt(row.w2.wake.p95, 2)} ms, p99 ${fmt(row.w2.wake.p99, 2)} ms (${((Date.now() - started) / 1000).toFixed(1)} s)`,
            );
        } catch (err: any) {
          log(`  failed: ${err?.stack ?? err}`);
          rows.push({ store, workload: w, mode, agents, error: String(err?.message ?? err) });
        }
      }
    }
    if (anatomyReps > 0 && (store !== 'postgres' || env.postgres) && !interrupted) {
      log(`▶ ${store} statements per operation …`);
      try {
        const blockMeter = store === 'postgres' ? async () => await meterFor(store, process.pid) : undefined;
        anatomy[store] = await withDriver(store, 'inproc', 'anatomy', ({ driver }) =>
          probeAnatomy(
            driver,
            anatomyReps,
            blockMeter &&
              (async () => {
                const m = await blockMeter();
                return { stop: async () => (await m.stop()).postgres_s ?? null };
              }),
          ),
        );
      } catch (err: any) {
        log(`  failed: ${err?.stack ?? err}`);
      }
    }
  }

  const usersRows: UsersRow[] = [];
  if (usersShape && !interrupted) {
    const redis = new URL(a['redis-url']!);
    usersRows.push(
      ...(await runUsers(
        stores.filter((s) => s !== 'postgres' || env.postgres),
        a['users-systems']!.split(',') as UsersSystem[],
        {
          tasks,
          agents: w1.agents,
          cap: w1.maxParallel,
          inFlight: int('users-in-flight', a['users-in-flight'], 1),
          w2Submits: int('users-w2-submits', a['users-w2-submits'], 1),
          w2Warmup: w2cfg.warmup,
          settleMs: w2cfg.settleMs,
          pgUrl,
          redis: { host: redis.hostname, port: Number(redis.port || 6379), prefix: a['redis-prefix']! },
          graphileConcurrency: int('graphile-concurrency', a['graphile-concurrency'], 1),
          port: nextPort,
          workloads: a['users-workloads']!.split(',').map((w) => choice('users-workloads', w, ['w1', 'w2'] as const)[0]!),
          log,
        },
        () => waitForQuiet(quietPct, quietMaxMs, (b) => log(`  machine busy ${b}% (other jobs?); waiting for it to calm down…`)),
        () => interrupted,
      )),
    );
  }
  const usersBody = usersTableRows(usersRows);

  for (const store of stores) {
    if (interrupted || scenarios.length === 0 || (store === 'postgres' && !env.postgres)) continue;
    try {
      scenarioResults[store] = await runScenarios(store, scenarios, {
        pgUrl,
        workerTasks: Number(a['worker-tasks']),
        pushTasks: Number(a['push-tasks']),
        schedules: Number(a.schedules),
        fireLagProcesses: a['fire-lag-processes']!.split(',').map(Number),
        fireLagRuns: Number(a['fire-lag-runs']),
        log,
      });
    } catch (err: any) {
      log(`  failed: ${err?.stack ?? err}`);
      scenarioResults[store] = { error: String(err?.message ?? err) };
    }
  }
  const SCENARIO_HEAD = ['store', 'scenario', 'figure', 'notes'];
  const scenarioBody = stores.flatMap((s) => {
    const r = scenarioResults[s];
    return !r ? [] : 'error' in r ? [[s, 'scenarios', 'FAILED', r.error as string]] : scenarioRows(s, r);
  });

  const setup = describeSetup();
  const body = tableRows();
  const text = [
    ...setup,
    ...(body.length ? ['', textTable(HEAD, body)] : []),
    '',
    anatomyText(false),
    ...(usersBody.length ? ['', USERS_SETUP, '', textTable(USERS_HEAD, usersBody)] : []),
    ...(scenarioBody.length ? ['', textTable(SCENARIO_HEAD, scenarioBody)] : []),
  ].join('\n');
  process.stdout.write(`\n${text}\n\nTotal ${((Date.now() - t0) / 1000).toFixed(0)} s.\n`);

  if (!a['no-save']) {
    mkdirSync(RESULTS, { recursive: true });
    const stamp = startedAt
      .toISOString()
      .replace(/\.\d+Z$/, 'Z')
      .replace(/:/g, '-');
    const jsonName = `engine-${stamp}.json`;
    const json = {
      env,
      options: { stores, workloads, modes, server: serverHow, tasks, warmup_tasks: warmupTasks, ...w1, w2: w2cfg, targets: TARGETS },
      setup,
      results: rows,
      users: usersRows,
      anatomy,
      scenarios: scenarioResults,
    };
    writeFileSync(join(RESULTS, jsonName), JSON.stringify(json, null, 2) + '\n');
    const md = [
      '# Baton engine benchmark — latest run',
      '',
      `Command: \`npm run bench${process.argv.length > 2 ? ' -- ' + process.argv.slice(2).join(' ') : ''}\` · full data: [${jsonName}](./${jsonName})`,
      '',
      ...setup.map((l) => `${l.startsWith('    ') ? '  ' : '- '}${l.trim()}`),
      '',
      ...(body.length ? [mdTable(HEAD, body), ''] : []),
      ...(Object.keys(anatomy).length
        ? ['Statements per engine operation (in-process, one at a time, idle, agents in their steady state):', '', anatomyText(true), '']
        : []),
      ...(usersBody.length ? [USERS_SETUP, '', mdTable(USERS_HEAD, usersBody), ''] : []),
      ...(scenarioBody.length ? ['Delivery and trigger scenarios:', '', mdTable(SCENARIO_HEAD, scenarioBody), ''] : []),
    ].join('\n');
    writeFileSync(join(RESULTS, 'latest.md'), md);
    process.stdout.write(`Saved bench/results/${jsonName} and bench/results/latest.md\n`);
  }
}

main()
  .catch((err) => {
    console.error(err?.stack ?? err);
    process.exitCode = 1;
  })
  .finally(async () => {
    killChildren();
    await cleanupAllDbs();
    await cleanupHistoryDbs();
  });
