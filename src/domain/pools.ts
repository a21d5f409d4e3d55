/**
 * Pools: named limits that several agents draw from, e.g. one model provider account shared by
 * five agents ("at most 20 concurrent requests and 400,000 tokens a minute"). A pool carries the
 * kinds of limit an agent does: seats (`max_parallel`), a throttle (starts per period,
 * src/domain/throttle.ts) and a budget (usage per window, src/domain/budget.ts). A task is
 * admitted only when its agent and every pool its agent draws from have room; admission reads and
 * advances the pools under their row locks (src/engine/pools.ts), so the limits are exact across
 * processes. Plain data and pure helpers here.
 */

import { afterStart, describeThrottle, throttleAdmits, type Throttle } from './throttle.ts';

/** Pool names: as agent names (lowercase letters, digits, dashes; 1 to 63 characters). */
export const POOL_NAME_PATTERN = /^[a-z0-9][a-z0-9-]{0,62}$/;
/** Pools one agent may draw from. */
export const MAX_POOLS_PER_AGENT = 8;

/** The pools an agent draws from, from its stored column (null: none), in name order. */
export function parsePools(json: string | null | undefined): string[] {
  if (json === null || json === undefined || json === '') return [];
  return (JSON.parse(json) as string[]).slice().sort();
}

/** The stored column for a list of pools: a JSON array in name order, each once; null when empty. */
export function poolsColumn(pools: readonly string[]): string | null {
  const names = [...new Set(pools)].sort();
  return names.length === 0 ? null : JSON.stringify(names);
}

/**
 * How many starts a throttle allows at `now`, up to `max`, and its state after them: each start
 * is one more GCRA emission (afterStart), allowed while throttleAdmits says so.
 */
export function startsAllowed(t: Throttle, tat: number | null, now: number, max: number): { starts: number; tat: number | null } {
  let starts = 0;
  let state = tat;
  while (starts < max && throttleAdmits(t, state, now)) {
    state = afterStart(t, state, now);
    starts++;
  }
  return { starts, tat: state };
}

/** The state after `n` starts at `now` (n at most what startsAllowed allowed). */
export function afterStarts(t: Throttle, tat: number | null, now: number, n: number): number | null {
  let state = tat;
  for (let i = 0; i < n; i++) state = afterStart(t, state, now);
  return state;
}

/** What limits admission of one agent beyond its own seats, as admission found it (src/engine/pools.ts). */
export type FlowLimit =
  | { kind: 'throttled'; next_admit_at: number }
  | { kind: 'pool_full'; pool: string; max_parallel: number; in_use: number }
  /** Seats are free but held for members that have waited longer (src/domain/pool-turns.ts): `turn_of` first. */
  | { kind: 'pool_turn'; pool: string; max_parallel: number; in_use: number; turn_of: string; since: number; waiting: number }
  | { kind: 'pool_throttled'; pool: string; next_admit_at: number };

/** A throttle in a waiting answer: its terms and when it next admits a start (ISO). */
export interface FlowThrottleView {
  limit: number;
  period_seconds: number;
  burst: number;
  next_admit_at: string;
}

/** The pool in a waiting answer: its seats and who holds them, its throttle, its spent limit. */
export interface FlowPoolView {
  name: string;
  /** null: the pool has no seat limit. */
  max_parallel: number | null;
  in_use: number;
  /** The running executions holding its seats, the longest-running first (at most SEAT_HOLDERS_SHOWN). */
  holders: Array<{ execution_id: string; agent: string; started_at: string | null; running_seconds: number | null }>;
  throttle: FlowThrottleView | null;
  /** pool_turn: the member whose turn a free seat is held for, since when it waits, and how many wait ahead of this agent. */
  turn: { agent: string; waiting_since: string; waiting: number } | null;
}

const secsIn = (iso: string, now: number) => Math.max(0, Math.round((Date.parse(iso) - now) / 1000));

/** The parts of a waiting answer (WaitingView) a flow limit's sentence reads. */
export interface FlowWaitingFacts {
  reason: string;
  throttle: FlowThrottleView | null;
  pool: FlowPoolView | null;
  budget: { metric: string; window: string; limit: number; spent: number; resets_at: string } | null;
}

/** The sentence for a flow-limit waiting answer (describeWaiting's cases for these reasons). */
export function describeFlowWaiting(w: FlowWaitingFacts, ahead: string, now: number): string {
  const t = (v: FlowThrottleView) => describeThrottle(v);
  const p = w.pool;
  switch (w.reason) {
    case 'throttled':
      return `The agent's throttle (${t(w.throttle!)}) admits its next start at ${w.throttle!.next_admit_at} (in ${secsIn(w.throttle!.next_admit_at, now)} s); ${ahead}.`;
    case 'pool_full': {
      const by = p!.holders.map((h) => `${h.execution_id} (${h.agent})`).join(', ');
      return `All ${p!.max_parallel} seats of pool ${p!.name} are taken (${p!.in_use} running${by ? `: ${by}` : ''}); it admits when one ends (${ahead}).`;
    }
    case 'pool_turn':
      return `Pool ${p!.name} has ${p!.max_parallel! - p!.in_use} free of ${p!.max_parallel} seats, held for agents of the pool that have waited longer (${p!.turn!.waiting} ahead; next: ${p!.turn!.agent}, waiting since ${p!.turn!.waiting_since}); this agent takes a seat when its turn comes (${ahead}).`;
    case 'pool_throttled':
      return `Pool ${p!.name}'s throttle (${t(p!.throttle!)}) admits its next start at ${p!.throttle!.next_admit_at} (in ${secsIn(p!.throttle!.next_admit_at, now)} s); ${ahead}.`;
    default:
      return `Pool ${p!.name}'s ${w.budget!.metric} budget per ${w.budget!.window} is spent (${w.budget!.spent} of ${w.budget!.limit}); it admits nothing until the window rolls at ${w.budget!.resets_at} (in ${secsIn(w.budget!.resets_at, now)} s) or the limit is raised (${ahead}).`;
  }
}
