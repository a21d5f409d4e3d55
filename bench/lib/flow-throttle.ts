/**
 * Throttle accuracy and wake latency (`npm run bench -- --only flow`, or alone with
 * `--flow-parts throttle`): one agent throttled (limit, period, burst), every task queued before
 * the first start, claim loops (long-poll, complete at once) draining it — on PostgreSQL from
 * several OS processes (bench/lib/flow-claimer.ts), on SQLite in the one process that serves the
 * file. From the database: the most starts in any window of one period against limit + burst, and
 * how long after the throttle allowed it each start came (the GCRA replayed over the real starts).
 *
 * Every loop is traced (bench/lib/claim-trace.ts), so a late start is explained: whether some
 * look ran after the throttle allowed the start and found it closed, or no loop looked at all
 * (and then what the waits that spanned the allowed time were waiting for: a reopening timer, the
 * poll, a signal).
 */
import { fork } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setMaxListeners } from 'node:events';
import { fileURLToPath } from 'node:url';
import { afterStart, nextStartAt, type Throttle } from '../../src/domain/throttle.ts';
import { Engine } from '../../src/engine/engine.ts';
import type { StoreAdapter } from '../../src/store/adapter.ts';
import { asLoop, traceClaims, type TraceRecord } from './claim-trace.ts';
import { checkFlow, type FlowCheck } from './flow.ts';
import { percentile, round } from './stats.ts';

export interface ThrottleConfig {
  throttle: Throttle;
  tasks: number;
  /** OS processes claiming (PostgreSQL); SQLite runs processes × loopsPerProcess loops in-process. */
  processes: number;
  loopsPerProcess: number;
}

type Stats = { p50: number; p99: number; max: number };

/** Why a start came more than LATE_MS after the throttle allowed it (counts of late starts). */
export interface LateCauses {
  /** Some look ran after the allowed time and found the throttle closed. */
  looked_closed: number;
  /** No loop looked, though a wait spanning the allowed time was due within LATE_MS of it (its timer fired late). */
  no_look_fired_late: number;
  /** No loop looked: the waits spanning the allowed time were timers armed for a later reopening. */
  no_look_armed_later: number;
  /** No loop looked: the waits spanning the allowed time knew no reopening (they waited for the poll). */
  no_look_poll: number;
  /** No loop was waiting at the allowed time, and some were in a look begun before it (which saw it closed). */
  no_look_in_look: number;
  /** No loop was waiting or looking at the allowed time (all were completing or between calls). */
  no_look_busy: number;
}

export interface ThrottleResult {
  store: string;
  throttle: Throttle;
  tasks: number;
  processes: number;
  /** Most starts in any half-open window of one period, and the bound limit + burst. */
  max_starts_per_window: number;
  bound: number;
  /** Start minus the moment the throttle allowed it (GCRA replayed over the real starts), ms. */
  open_to_start_ms: Stats;
  /** Starts later than LATE_MS after the throttle allowed them. */
  late_over_50ms: number;
  /** Starts a second from the first start to the last (below the limit: admission, not the throttle, set the pace). */
  starts_per_s: number;
  /**
   * The idle-to-start latency: the same, over the starts at whose allowed time some claim
   * was parked (waiting, not looking or completing), so the wake decided when it started.
   */
  parked_open_to_start_ms: Stats;
  parked_starts: number;
  parked_late_over_50ms: number;
  /** The claim loop got the row back, minus the allowed time. */
  open_to_worker_ms: Stats;
  /** One admission (a look), start to end, ms. */
  look_ms: Stats;
  /** Looks that admitted nothing, of all looks. */
  empty_looks: number;
  looks: number;
  /** A wait that asked for a reopening timer ended this long after the reopening it was armed for. */
  timer_fire_after_reopen_ms: Stats;
  late_causes: LateCauses;
  starts_by_process: Record<string, number>;
  /** Per claimer process (PostgreSQL): its offset to the database's clock and that offset's error bound, ms. */
  clocks: Record<string, { offsetMs: number; errorMs: number }>;
  check: FlowCheck;
}

export const LATE_MS = 50;
const CLAIMER = fileURLToPath(new URL('./flow-claimer.ts', import.meta.url));
const AGENT = 'thr-agent';
/** Each claim's long-poll (longer than the engine's poll, so a parked claim polls between). */
export const CLAIM_WAIT_MS = 2000;

function stats(xs: number[]): Stats {
  return { p50: round(percentile(xs, 50), 1), p99: round(percentile(xs, 99), 1), max: round(xs.length ? Math.max(...xs) : NaN, 1) };
}

/**
 * Claim loops on `agent` until `tasks` of its tasks have succeeded: each claims one (long-poll),
 * completes it at once and claims again. Traced into `trace` when given.
 */
export async function claimUntilDone(
  engine: Engine,
  store: StoreAdapter,
  opts: { agent: string; tasks: number; loops: number; name: string; trace?: TraceRecord[] },
): Promise<void> {
  const stop = new AbortController();
  setMaxListeners(100, stop.signal);
  if (opts.trace) traceClaims(engine, opts.trace);
  const loop = (k: number) =>
    asLoop(`${opts.name}-${k}`, async () => {
      while (!stop.signal.aborted) {
        let rows;
        try {
          rows = await engine.claim(opts.agent, { owner: `${opts.name}-${k}`, max: 1, waitMs: CLAIM_WAIT_MS, signal: stop.signal });
        } catch (err) {
          if (stop.signal.aborted) return;
          throw err;
        }
        for (const r of rows) opts.trace?.push({ kind: 'got', loop: `${opts.name}-${k}`, at: engine.now(), id: r.id });
        for (const r of rows) await engine.complete(r.id, r.lease_token!, { status: 'succeeded' }, opts.name);
      }
    });
  const finished = async () => {
    const { n } = await store.db
      .selectFrom('executions')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('agent', '=', opts.agent)
      .where('status', '=', 'succeeded')
      .executeTakeFirstOrThrow();
    return Number(n);
  };
  const watch = setInterval(() => {
    finished().then(
      (n) => {
        if (n >= opts.tasks) stop.abort();
      },
      () => {},
    );
  }, 250);
  try {
    await Promise.all(Array.from({ length: opts.loops }, (_, k) => loop(k)));
  } finally {
    clearInterval(watch);
  }
}

type Skew = { offsetMs: number; errorMs: number };

/** Fork the claimer processes and wait for them; their traces and clock offsets, read from `dir`. */
async function forkClaimers(
  env: Record<string, string>,
  cfg: ThrottleConfig,
): Promise<{ trace: TraceRecord[]; clocks: Record<string, Skew> }> {
  const dir = mkdtempSync(join(tmpdir(), 'baton-bench-throttle-trace-'));
  try {
    const children = Array.from({ length: cfg.processes }, (_, p) =>
      fork(CLAIMER, [AGENT, String(cfg.tasks), String(cfg.loopsPerProcess), `p${p}`, join(dir, `p${p}.json`)], {
        env: { ...process.env, ...env },
        execArgv: ['--import', 'tsx'],
        stdio: 'inherit',
      }),
    );
    await Promise.all(
      children.map(
        (c) =>
          new Promise<void>((resolve, reject) =>
            c.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`claimer exited ${code}`)))),
          ),
      ),
    );
    const files = readdirSync(dir).map((f) => [f.replace(/\.json$/, ''), JSON.parse(readFileSync(join(dir, f), 'utf8'))] as const);
    const out = files as unknown as Array<[string, { trace: TraceRecord[]; clock: Skew }]>;
    return {
      trace: out.flatMap(([, x]) => x.trace),
      clocks: Object.fromEntries(out.map(([p, x]) => [p, { offsetMs: round(x.clock.offsetMs, 1), errorMs: round(x.clock.errorMs, 1) }])),
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function runThrottle(store: StoreAdapter, env: Record<string, string>, cfg: ThrottleConfig): Promise<ThrottleResult> {
  const engine = new Engine({ store, nodeId: 'bench' });
  let trace: TraceRecord[] = [];
  try {
    await engine.agents.create({ name: AGENT, max_parallel: 50, max_backlog: cfg.tasks + 10, throttle: cfg.throttle }, 'bench');
    await engine.submitMany(
      AGENT,
      Array.from({ length: cfg.tasks }, (_, i) => ({ message: 'noop', payload: { i } })),
      'bench',
    );
    if (store.kind === 'sqlite')
      await claimUntilDone(engine, store, {
        agent: AGENT,
        tasks: cfg.tasks,
        loops: cfg.processes * cfg.loopsPerProcess,
        name: 'p0',
        trace,
      });
  } finally {
    engine.close();
  }
  let clocks: Record<string, Skew> = {};
  if (store.kind !== 'sqlite') ({ trace, clocks } = await forkClaimers(env, cfg));
  const rows = await store.db
    .selectFrom('executions')
    .select(['id', 'started_at', 'lease_owner'])
    .where('agent', '=', AGENT)
    .orderBy('started_at')
    .orderBy('id')
    .execute();
  const byProcess: Record<string, number> = {};
  for (const r of rows) {
    const p = String(r.lease_owner ?? '?').split('-')[0]!;
    byProcess[p] = (byProcess[p] ?? 0) + 1;
  }
  return {
    store: store.kind,
    throttle: cfg.throttle,
    tasks: cfg.tasks,
    processes: store.kind === 'sqlite' ? 1 : cfg.processes,
    ...analyse(
      cfg.throttle,
      rows.map((r) => ({ id: r.id, start: Number(r.started_at) })),
      trace,
    ),
    starts_by_process: byProcess,
    clocks,
    check: await checkFlow(store, 'thr-'),
  };
}

type Analysis = Omit<ThrottleResult, 'store' | 'throttle' | 'tasks' | 'processes' | 'starts_by_process' | 'clocks' | 'check'>;

/** The window bound, the lateness of every start, and the trace's account of the late ones. */
export function analyse(t: Throttle, starts: { id: string; start: number }[], trace: TraceRecord[]): Analysis {
  const periodMs = t.period_seconds * 1000;
  let maxInWindow = 0;
  for (let i = 0, j = 0; i < starts.length; i++) {
    while (starts[i]!.start - starts[j]!.start >= periodMs) j++;
    maxInWindow = Math.max(maxInWindow, i - j + 1);
  }
  const looks = trace.filter((r) => r.kind === 'look');
  const waits = trace.filter((r) => r.kind === 'wait');
  const got = new Map(trace.flatMap((r) => (r.kind === 'got' ? [[r.id, r.at] as const] : [])));
  // Every task was queued before the first start, so each start was held only by the throttle
  // (seats never bind: max_parallel 50 against a few claim loops that complete at once).
  let tat: number | null = null;
  const lateness: number[] = [];
  const parked: number[] = [];
  const toWorker: number[] = [];
  const causes: LateCauses = {
    looked_closed: 0,
    no_look_fired_late: 0,
    no_look_armed_later: 0,
    no_look_poll: 0,
    no_look_in_look: 0,
    no_look_busy: 0,
  };
  for (const s of starts) {
    const allowed = nextStartAt(t, tat, 0);
    if (allowed > 0 && tat !== null) {
      lateness.push(s.start - allowed);
      if (waits.some((w) => w.at <= allowed && w.end > allowed)) parked.push(s.start - allowed);
      const g = got.get(s.id);
      if (g !== undefined) toWorker.push(g - allowed);
      if (s.start - allowed > LATE_MS && trace.length > 0) {
        const closed = looks.some((l) => l.at >= allowed && l.at < s.start && l.ids.length === 0);
        const spanning = waits.filter((w) => w.at <= allowed && w.end > allowed);
        if (closed) causes.looked_closed++;
        else if (spanning.length === 0) causes[looks.some((l) => l.at < allowed && l.end > allowed) ? 'no_look_in_look' : 'no_look_busy']++;
        else if (spanning.some((w) => w.at + w.ms <= allowed + LATE_MS)) causes.no_look_fired_late++;
        else if (spanning.some((w) => w.reopensAt !== null)) causes.no_look_armed_later++;
        else causes.no_look_poll++;
      }
    }
    tat = afterStart(t, tat, s.start);
  }
  // How long after the reopening it was armed for each reopening timer ended (not ended early by a signal).
  const fireAfter: number[] = [];
  for (const w of waits) if (!w.early && w.reopensAt !== null && w.at + w.ms >= w.reopensAt) fireAfter.push(w.end - w.reopensAt);
  return {
    max_starts_per_window: maxInWindow,
    bound: t.limit + t.burst,
    open_to_start_ms: stats(lateness),
    late_over_50ms: lateness.filter((x) => x > LATE_MS).length,
    starts_per_s: starts.length > 1 ? round(((starts.length - 1) * 1000) / (starts.at(-1)!.start - starts[0]!.start), 1) : NaN,
    parked_open_to_start_ms: stats(parked),
    parked_starts: parked.length,
    parked_late_over_50ms: parked.filter((x) => x > LATE_MS).length,
    open_to_worker_ms: stats(toWorker),
    look_ms: stats(looks.map((l) => l.end - l.at)),
    empty_looks: looks.filter((l) => l.ids.length === 0).length,
    looks: looks.length,
    timer_fire_after_reopen_ms: stats(fireAfter),
    late_causes: causes,
  };
}
