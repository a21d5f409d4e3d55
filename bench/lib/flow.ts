/**
 * Flow-control workloads (`npm run bench -- --only flow`), in-process on the Engine API:
 *
 * - W1 with keys and pools: bench/lib/flow-w1.ts;
 * - noisy neighbour: key A floods N tasks, key B submits one task a second; B's wait
 *   (started_at − queued_at) against its wait with no flood. Then the same with a pool shared by
 *   two agents: agent A floods, agent B one a second. Each shape in two configurations: isolated,
 *   as a user who wants tenants isolated deploys it (a key cap one below the agent's seats; in the
 *   pool, each agent's seats one below the pool's), so a flood can never hold every seat; and
 *   uncapped, fairness alone (B is next in turn but waits for a seat the flood holds to free);
 * - throttle accuracy and wake latency: bench/lib/flow-throttle.ts.
 *
 * After each run the canary runs one full cycle on the database: F-01 and F-02 must find
 * nothing, and every task must have run once (succeeded, attempt 1).
 */
import { setMaxListeners } from 'node:events';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { runCanaryOnce } from '../../src/canary/run.ts';
import { Engine } from '../../src/engine/engine.ts';
import type { StoreAdapter } from '../../src/store/adapter.ts';
import { checkpointStats } from '../../src/store/sqlite.ts';
import { percentile, round } from './stats.ts';
import type { W1Config } from './w1.ts';

export interface FlowCheck {
  /** F-01 and F-02 findings of a full canary cycle after the run (must be 0). */
  f01: number;
  f02: number;
  tasks: number;
  /** Tasks that did not end succeeded on their first attempt (must be 0). */
  not_once: number;
  ok: boolean;
}

/** A full canary cycle and a count of tasks that did not run exactly once. */
export async function checkFlow(store: StoreAdapter, agentPrefix: string): Promise<FlowCheck> {
  const report = await runCanaryOnce({ store, full: true });
  const count = (id: string) => report.checks.find((c) => c.id === id)?.findings.length ?? -1;
  const rows = await store.db.selectFrom('executions').select(['status', 'attempt']).where('agent', 'like', `${agentPrefix}%`).execute();
  const notOnce = rows.filter((r) => r.status !== 'succeeded' || Number(r.attempt) !== 1).length;
  const f01 = count('F-01');
  const f02 = count('F-02');
  return { f01, f02, tasks: rows.length, not_once: notOnce, ok: f01 === 0 && f02 === 0 && notOnce === 0 };
}

// ── noisy neighbour ──────────────────────────────────────────────────────────

export interface NoisyConfig {
  /** Tasks the flooding key (or agent) submits at once. */
  flood: number;
  /** Tasks the quiet key (or agent) submits, one a second. */
  quiet: number;
  /** Work per task (a sleep), ms. */
  workMs: number;
  /** Claim loops per agent. */
  loops: number;
  maxParallel: number;
}

/**
 * `isolated`: key_max_parallel = maxParallel − 1 (key shape), or each agent's max_parallel =
 * maxParallel − 1 under a pool of maxParallel (pool shape). `uncapped`: no key cap, agents as
 * large as the pool.
 */
export type NoisyConfiguration = 'isolated' | 'uncapped';

export interface NoisyResult {
  shape: 'key' | 'pool';
  configuration: NoisyConfiguration;
  flood: number;
  quiet: number;
  /** B's wait (started_at − queued_at), ms, with the flood and without it. */
  with_flood: { p50: number; p99: number; max: number };
  alone: { p50: number; p99: number; max: number };
  ratio_p99: number;
  /** Why B's longest waits: the five longest with the flood, ms; the event loop's longest delay in that run, ms; SQLite's checkpoints that held the writer's turn in it (null: PostgreSQL). */
  longest: number[];
  loop_delay_max_ms: number;
  wal_holds: number | null;
  /** Flood tasks still queued when the last quiet task started (the flood was really there). */
  flood_queued_at_end: number;
  check: FlowCheck;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Claim loops on `agent` until aborted: claim one (long-poll), sleep workMs, complete. */
async function worker(engine: Engine, agent: string, owner: string, workMs: number, signal: AbortSignal): Promise<void> {
  while (!signal.aborted) {
    let rows;
    try {
      rows = await engine.claim(agent, { owner, max: 1, waitMs: 1000, signal });
    } catch (err) {
      if (signal.aborted) return;
      throw err;
    }
    for (const r of rows) {
      if (workMs > 0) await sleep(workMs);
      await engine.complete(r.id, r.lease_token!, { status: 'succeeded' }, 'bench');
    }
  }
}

function waitStats(ws: number[]) {
  const s = [...ws].sort((x, y) => x - y);
  return { p50: round(percentile(s, 50), 1), p99: round(percentile(s, 99), 1), max: round(s[s.length - 1] ?? NaN, 1) };
}

/**
 * One noisy-neighbour run on a fresh store: `flood` tasks for A at once (none with flood = 0),
 * then `quiet` tasks for B one a second; waits until everything ran. Returns B's waits.
 */
async function noisyOnce(
  store: StoreAdapter,
  shape: 'key' | 'pool',
  cfg: NoisyConfig,
  configuration: NoisyConfiguration,
  flood: number,
  prefix: string,
): Promise<{ waits: number[]; floodQueuedAtEnd: number; loopDelayMax: number; walHolds: number | null }> {
  const loop = monitorEventLoopDelay({ resolution: 5 });
  loop.enable();
  const holdsBefore = checkpointStats(store)?.held;
  const engine = new Engine({ store, nodeId: 'bench' });
  const stop = new AbortController();
  // Every claim loop's long-poll listens on this one signal.
  setMaxListeners(100, stop.signal);
  try {
    const agentA = `${prefix}a`;
    const agentB = shape === 'key' ? agentA : `${prefix}b`;
    const backlog = flood + cfg.quiet + 10;
    const below = Math.max(1, cfg.maxParallel - 1);
    if (shape === 'key') {
      const keyCap = configuration === 'isolated' ? below : null;
      await engine.agents.create({ name: agentA, max_parallel: cfg.maxParallel, key_max_parallel: keyCap, max_backlog: backlog }, 'bench');
    } else {
      await engine.pools.create({ name: `${prefix}pool`, max_parallel: cfg.maxParallel }, 'bench');
      const seats = configuration === 'isolated' ? below : cfg.maxParallel;
      for (const name of [agentA, agentB])
        await engine.agents.create({ name, max_parallel: seats, max_backlog: backlog, pools: [`${prefix}pool`] }, 'bench');
    }
    const loops: Promise<void>[] = [];
    for (const agent of new Set([agentA, agentB]))
      for (let k = 0; k < cfg.loops; k++) loops.push(worker(engine, agent, `${agent}-w${k}`, cfg.workMs, stop.signal));
    const keyA = shape === 'key' ? { key: 'A' } : {};
    const keyB = shape === 'key' ? { key: 'B' } : {};
    for (let off = 0; off < flood; off += 500) {
      const n = Math.min(500, flood - off);
      await engine.submitMany(
        agentA,
        Array.from({ length: n }, (_, i) => ({ message: 'flood', payload: { i: off + i }, ...keyA })),
        'bench',
      );
    }
    const quietIds: string[] = [];
    for (let i = 0; i < cfg.quiet; i++) {
      await sleep(1000);
      quietIds.push((await engine.submit(agentB, { message: 'quiet', payload: { i }, ...keyB }, 'bench')).id);
    }
    const started = async () =>
      store.db.selectFrom('executions').select(['id', 'queued_at', 'started_at']).where('id', 'in', quietIds).execute();
    let rows = await started();
    while (rows.some((r) => r.started_at === null)) {
      await sleep(50);
      rows = await started();
    }
    const { n: floodQueued } = await store.db
      .selectFrom('executions')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('agent', '=', agentA)
      .where('status', '=', 'queued')
      .executeTakeFirstOrThrow();
    // Let the flood finish, so the check after the run sees every task once.
    for (;;) {
      const { n } = await store.db
        .selectFrom('executions')
        .select((eb) => eb.fn.countAll<number>().as('n'))
        .where('agent', 'like', `${prefix}%`)
        .where('status', 'in', ['queued', 'running'])
        .executeTakeFirstOrThrow();
      if (Number(n) === 0) break;
      await sleep(200);
    }
    loop.disable();
    const holdsAfter = checkpointStats(store)?.held;
    return {
      waits: rows.map((r) => Number(r.started_at) - Number(r.queued_at)),
      floodQueuedAtEnd: Number(floodQueued),
      loopDelayMax: loop.max / 1e6,
      walHolds: holdsBefore === undefined || holdsAfter === undefined ? null : holdsAfter - holdsBefore,
    };
  } finally {
    loop.disable();
    stop.abort();
    engine.close();
  }
}

export async function runNoisy(
  open: (label: string) => Promise<{ store: StoreAdapter; done(): Promise<void> }>,
  shape: 'key' | 'pool',
  configuration: NoisyConfiguration,
  cfg: NoisyConfig,
): Promise<NoisyResult> {
  const alone = await open(`noisy_${shape}_${configuration}_alone`);
  let base;
  try {
    base = await noisyOnce(alone.store, shape, cfg, configuration, 0, 'nn-');
  } finally {
    await alone.done();
  }
  const flooded = await open(`noisy_${shape}_${configuration}_flood`);
  let withFlood;
  let check: FlowCheck;
  try {
    withFlood = await noisyOnce(flooded.store, shape, cfg, configuration, cfg.flood, 'nn-');
    check = await checkFlow(flooded.store, 'nn-');
  } finally {
    await flooded.done();
  }
  const w = waitStats(withFlood.waits);
  const a = waitStats(base.waits);
  return {
    shape,
    configuration,
    flood: cfg.flood,
    quiet: cfg.quiet,
    with_flood: w,
    alone: a,
    ratio_p99: round(w.p99 / Math.max(1, a.p99), 2),
    longest: [...withFlood.waits].sort((x, y) => y - x).slice(0, 5),
    loop_delay_max_ms: round(withFlood.loopDelayMax, 1),
    wal_holds: withFlood.walHolds,
    flood_queued_at_end: withFlood.floodQueuedAtEnd,
    check,
  };
}

export type { W1Config };
