/**
 * Flow control per concurrency key: plain data and pure rules, defined once for the engine, the
 * API, the CLI, MCP and the dashboard.
 *
 * Glossary:
 * - key: a task's concurrency key (API `key`, column executions.flow_key), e.g. `user:42`.
 * - fairness round: a keyed task's turn among its agent's keys (executions.fair_round). A keyed
 *   submit takes round max(key's last round + 1, agent's admit_round); a task without a key has
 *   round 0. Admission takes tasks in ADMISSION_ORDER, so one key's backlog delays another key's
 *   task by at most one turn.
 * - key cap: running tasks per key (agents.key_max_parallel, per-key agents.key_overrides).
 * - key throttle: starts per period on each key separately (agents.key_throttle, a Throttle).
 * - debounce: a keyed submit that folds into the key's queued, not yet due, debounced task.
 * - singleton: a keyed submit refused while the key has a queued or running task.
 */

import type { AgentFactInputs } from './admission.ts';
import { parseThrottle, type Throttle } from './throttle.ts';

/** The order admission takes queued tasks of one agent in, everywhere (the admission index's columns). */
export const ADMISSION_ORDER = Object.freeze(['priority', 'fair_round', 'queued_at', 'id'] as const);

export const KEY_MAX_CHARS = 200;
/** A key's characters: letters, digits and . _ : / @ + = - */
export const KEY_PATTERN = /^[A-Za-z0-9._:/@+=-]+$/;
export const KEY_PATTERN_MESSAGE = 'letters, digits and . _ : / @ + = - only';
export const DEBOUNCE_MAX_SECONDS = 3600;
export const KEY_CAP_MAX = 10_000;
/** Overrides one agent may carry: the row is read by every admission. */
export const KEY_OVERRIDES_MAX = 1_000;

/** What is wrong with a key, or null. */
export function keyProblem(key: string): string | null {
  if (key.length < 1 || key.length > KEY_MAX_CHARS) return `must be 1 to ${KEY_MAX_CHARS} characters`;
  if (!KEY_PATTERN.test(key)) return KEY_PATTERN_MESSAGE;
  return null;
}

/** An agent's per-key limits, from its columns. */
export interface KeyLimits {
  /** The default cap of every key (null: none). */
  maxParallel: number | null;
  overrides: Record<string, number>;
  throttle: Throttle | null;
}

export interface KeyLimitColumns {
  key_max_parallel: number | null;
  key_overrides: string | null;
  key_throttle: string | null;
}

export function keyLimits(a: KeyLimitColumns): KeyLimits | null {
  if (a.key_max_parallel === null && a.key_overrides === null && a.key_throttle === null) return null;
  return {
    maxParallel: a.key_max_parallel === null ? null : Number(a.key_max_parallel),
    overrides: a.key_overrides ? (JSON.parse(a.key_overrides) as Record<string, number>) : {},
    throttle: parseThrottle(a.key_throttle),
  };
}

/** A key's cap (null: no cap). */
export function keyCap(limits: KeyLimits | null, key: string): number | null {
  if (!limits) return null;
  return Object.hasOwn(limits.overrides, key) ? limits.overrides[key]! : limits.maxParallel;
}

/**
 * A flow limit: something beyond holds that may stop admission of some of an agent's tasks. Its
 * `mayApply` says whether it can apply to the agent at all, from the agent row alone; a claim may
 * take the fast path only where no hold and no limit may apply (src/domain/fast-paths.ts).
 */
export interface FlowLimit {
  readonly name: string;
  mayApply(a: AgentFactInputs): boolean;
}

/** Every flow limit. A new one goes here. */
export const FLOW_LIMITS: readonly FlowLimit[] = Object.freeze([
  { name: 'key_caps', mayApply: (a: AgentFactInputs) => a.key_max_parallel != null || a.key_overrides != null },
  { name: 'key_throttle', mayApply: (a: AgentFactInputs) => a.key_throttle != null },
  // Starts per period on the agent (src/domain/throttle.ts): admission advances its state.
  { name: 'throttle', mayApply: (a: AgentFactInputs) => a.throttle != null },
  // Seats, throttles and budgets of the pools it draws from (src/domain/pools.ts).
  { name: 'pools', mayApply: (a: AgentFactInputs) => a.pools != null },
  // Turns among a pool's members (src/domain/pool-turns.ts): a free seat is held for the member
  // that has waited longest, so admission reads and writes the pool's waits.
  { name: 'pool_turn', mayApply: (a: AgentFactInputs) => a.pools != null },
]);

/** What one key's live state says in the keys read and in `waiting`. */
export interface KeyState {
  key: string;
  running: number;
  queued: number;
  /** Its cap (null: none). */
  max_parallel: number | null;
  /** Its throttle's next start (ms; null: no throttle, or it admits now). */
  throttled_until: number | null;
}
