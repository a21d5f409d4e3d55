/**
 * A trace of what claim loops do, for the throttle workload (bench/lib/flow-throttle.ts): each
 * look at the queue (when it ran on the engine's clock, what it admitted, when it said the
 * throttle reopens), each wait between looks (how long it asked for, when it ended, whether a
 * signal ended it before its timer) and when the loop got its rows. Bench-only: it wraps the
 * engine's private claim internals of one Engine instance (nothing in src/ knows about it), and
 * tells the records apart per claim loop with AsyncLocalStorage.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { Engine } from '../../src/engine/engine.ts';
import type { AdmitOptions } from '../../src/engine/transitions/admit.ts';
import type { ExecutionRow } from '../../src/store/schema.ts';

export type TraceRecord =
  /** One admission: ran from `at` to `end` (engine clock); `reopensAt` as it reported (null: none). */
  | { kind: 'look'; loop: string; at: number; end: number; ids: string[]; reopensAt: number | null }
  /**
   * One wait between looks: asked for `ms`; `early`: a signal ended it before its timer;
   * `reopensAt`: the reopening the look before it reported (null: none, so it waits for the poll).
   */
  | { kind: 'wait'; loop: string; at: number; end: number; ms: number; early: boolean; reopensAt: number | null }
  /** The claim loop got `id` back from engine.claim at `at`. */
  | { kind: 'got'; loop: string; at: number; id: string };

const current = new AsyncLocalStorage<string>();

/** Run `fn` as claim loop `loop` (its records carry that name). */
export function asLoop<T>(loop: string, fn: () => Promise<T>): Promise<T> {
  return current.run(loop, fn);
}

interface Internals {
  admitOnce(agent: string, opts: AdmitOptions): Promise<ExecutionRow[]>;
  claimWaits: { waiters: { arm(agent: string, signal?: AbortSignal): { wait(ms: number): Promise<void>; disarm(): void } } };
}

/** Record `engine`'s looks and waits into `out` (times from `engine.now()`). */
export function traceClaims(engine: Engine, out: TraceRecord[]): void {
  const e = engine as unknown as Internals;
  const lastReopen = new Map<string, number | null>();
  const admitOnce = e.admitOnce.bind(engine);
  e.admitOnce = async (agent, opts) => {
    const loop = current.getStore() ?? '?';
    const at = engine.now();
    let reopensAt: number | null = null;
    const onFlow = opts.onFlow;
    const rows = await admitOnce(agent, {
      ...opts,
      onFlow: (f) => {
        reopensAt = f.reopensAt;
        onFlow?.(f);
      },
    });
    out.push({ kind: 'look', loop, at, end: engine.now(), ids: rows.map((r) => r.id), reopensAt });
    lastReopen.set(loop, reopensAt);
    return rows;
  };
  const waiters = e.claimWaits.waiters;
  const arm = waiters.arm.bind(waiters);
  waiters.arm = (agent, signal) => {
    const armed = arm(agent, signal);
    return {
      disarm: armed.disarm,
      wait: async (ms) => {
        const loop = current.getStore() ?? '?';
        const t0 = performance.now();
        const at = engine.now();
        await armed.wait(ms);
        const early = performance.now() - t0 < ms - 1;
        out.push({ kind: 'wait', loop, at, end: engine.now(), ms, early, reopensAt: lastReopen.get(loop) ?? null });
      },
    };
  };
}
