/**
 * Flow state in the history benches (bench/lib/history.ts, bench/canary-history.ts): among the
 * history's agents, one with concurrency keys (a cap and a throttle per key; its past tasks carry
 * keys, bench/lib/history-fill.ts) and two that share a pool's seats and throttle, so the canary's
 * flow invariants (seats per key and per pool, throttle starts per window, debounced bursts) run
 * over the seeded store and the reads behind keys and pools meet a long history.
 */
import type { Engine } from '../../src/engine/engine.ts';

export const HISTORY_POOL = 'hist-pool';
/** The keyed agent and the pooled ones, by index among the history's agents. */
export const KEYED_AGENT = 10;
export const POOLED_AGENTS = [11, 12];
/** Distinct keys among the keyed agent's past tasks. */
export const HISTORY_KEYS = 1000;

/** The pool, made before its agents. */
export async function createHistoryPool(engine: Engine): Promise<void> {
  await engine.pools.create({ name: HISTORY_POOL, max_parallel: 4, throttle: { limit: 1000, period_seconds: 1, burst: 0 } }, 'bench');
}

/** The flow settings of the history's agent `i` (none for most). */
export function historyFlowSettings(i: number) {
  if (i === KEYED_AGENT) return { key_max_parallel: 1, key_throttle: { limit: 100, period_seconds: 1, burst: 0 } };
  if (POOLED_AGENTS.includes(i)) return { pools: [HISTORY_POOL] };
  return {};
}

/** A task's key when it is for agent `i` (k: any counter), or none. */
export const historyKeyOf = (i: number, k: number): { key?: string } => (i === KEYED_AGENT ? { key: `k-${k % 50}` } : {});
