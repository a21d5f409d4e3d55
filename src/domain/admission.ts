/**
 * Why an agent may not admit, and why a queued execution is not running: the closed lists,
 * defined once for the engine, the API, the CLI, MCP and the dashboard.
 *
 * Hold and waiting are defined in docs/concepts.md#glossary. A new hold is one entry of HOLD_RULES
 * below and touches no SQL: `admissionHold` decides from the list, and each entry's `mayApply`
 * feeds the fast-path facts (src/domain/fast-paths.ts).
 */

import type { BreakerState } from './breaker.ts';
import type { LimitStatus } from './budget.ts';
import { describeFlowWaiting, type FlowPoolView, type FlowThrottleView } from './pools.ts';

/** Agent-level holds, in the order admission checks them. */
export const ADMISSION_HOLDS = Object.freeze(['agent_paused', 'lapse_hold', 'budget_spent', 'pool_budget_spent', 'breaker_open'] as const);
export type AdmissionHold = (typeof ADMISSION_HOLDS)[number];

/**
 * Every reason a queued execution may be waiting, in the order they are checked: the first that
 * applies is the answer.
 * - run_after: not allowed to start yet.
 * - agent_paused: an operator paused the agent (a hold).
 * - lapse_hold: several of the agent's leases lapsed at once; held until a worker is seen (a hold).
 * - budget_spent: a budget limit is spent for the current window; held until it rolls (a hold).
 * - breaker_open: the agent's circuit breaker is open (until its cool-down ends) or half-open with
 *   its one probe running (a hold; src/domain/breaker.ts).
 * - serial_busy: a run with the same serial key (a schedule's overlap policy 'queue') is running.
 * - seats_taken: every seat (max_parallel) is held by a running execution.
 * - throttled: the agent's throttle allows no start now; it says when it next does.
 * - pool_full: every seat of a pool the agent draws from is held (by its agents' running tasks).
 * - pool_turn: a pool has free seats, but they are held for members of the pool that have waited
 *   longer for one (turns among a pool's agents, src/domain/pool-turns.ts); it names whose turn it is.
 * - pool_throttled: a pool's throttle allows no start now; it says when it next does.
 * - pool_budget_spent (a hold, after budget_spent): a budget of a pool the agent draws from is spent.
 * - key_busy: its key's cap (key_max_parallel or the key's override) is held by running executions.
 * - key_throttled: its key's throttle is closed; `key.next_start_at` says when it next admits.
 * - no_worker: pull agent, seats free, but no worker has claimed for it lately.
 * - push_failing: push agent, seats free, and its last delivery failed.
 * - next_in_line: seats free and someone is serving the agent: it starts at the next claim or
 *   dispatch (behind the executions `ahead` of it).
 */
export const WAITING_REASONS = Object.freeze([
  'run_after',
  ...ADMISSION_HOLDS,
  'serial_busy',
  'seats_taken',
  'throttled',
  'pool_full',
  'pool_turn',
  'pool_throttled',
  'key_busy',
  'key_throttled',
  'no_worker',
  'push_failing',
  'next_in_line',
] as const);
export type WaitingReason = (typeof WAITING_REASONS)[number];

/**
 * A claim stamps `agents.last_claim_at` at most this often. A claim stamps inside the admission
 * transaction, which already holds the agent row, so the stamp costs a row write per agent per
 * interval rather than one per claim; the price is that "last claimed" is up to this much stale.
 */
export const CLAIM_STAMP_EVERY_MS = 5_000;

/** Whether a claim at `now` stamps `agents.last_claim_at` (last stamped at `last`, null: never). */
export function claimStampDue(last: number | string | null, now: number): boolean {
  return last === null || now - Number(last) >= CLAIM_STAMP_EVERY_MS;
}

/**
 * A pull agent with free seats and no claim for this long has no worker serving it (`no_worker`).
 * Six stamp intervals: a long-polling worker re-checks at least every second, so a live one is
 * never reported idle; a worker busy on long tasks with none to spare is, and that is the fact.
 */
export const NO_WORKER_AFTER_MS = 30_000;

/**
 * Shared-cause lapses (src/engine/transitions/expire.ts). When at least this many of one agent's
 * leases lapse in the same reaper transaction, the reaper takes it for one cause outside the
 * tasks (the agent's workers died together, a network split) rather than each task killing its
 * worker: it re-queues them without charging the attempt and sets the agent's `lapse_hold`.
 * Two, because one lapse cannot be told apart from a task that crashes or hangs its worker (the
 * case redelivery counting is for), while two leases expiring inside one reaper interval (2 s)
 * means something they share went away. While the hold stands (no worker seen since), a lone
 * lapse of the same agent counts as part of that outage too (a lease taken a little later).
 */
export const SHARED_LAPSE_THRESHOLD = 2;

/**
 * One execution is forgiven a shared-cause lapse at most this many times; later lapses are
 * charged as usual. Without the cap, tasks that each crash their worker would never be poisoned
 * as long as two of them run, and die, at once.
 */
export const MAX_FORGIVEN_LAPSES = 3;

/**
 * A push agent's lapse hold ends after this long: Baton's own dispatcher is its worker, so there
 * is no claim or heartbeat to wait for; the next dispatch after it clears the hold and delivers.
 * (A pull agent's hold ends at the next claim or heartbeat from one of its workers.)
 */
export const PUSH_LAPSE_HOLD_MS = 30_000;

/** Positions in a queue are counted up to this many (the answer then says "1000+"). */
export const AHEAD_COUNT_CAP = 1_000;

/** Running executions listed by name in a `seats_taken` answer (the count covers the rest). */
export const SEAT_HOLDERS_SHOWN = 20;

/** The columns of an agent row a hold is decided from. */
export interface AdmissionState {
  /** Absent where only the hold columns are at hand (the waiting answer's callers give it). */
  name?: string;
  paused_at: number | null;
  paused_by: string | null;
  paused_reason: string | null;
  /** Shared-cause lapse hold: when the reaper set it and how many leases lapsed together. */
  lapse_hold_at: number | null;
  lapse_hold_count: number | null;
  /**
   * Budget: not a column but the first spent limit, from the ledger rows of the current
   * windows that admission read under the agent lock (`firstSpent` in src/domain/budget.ts); null
   * or absent: no limit is spent.
   */
  budget_spent?: LimitStatus | null;
  /**
   * Circuit breaker: not a column but `breakerAdmission(…).hold` (src/domain/breaker.ts),
   * decided by admission from the locked row, the clock and whether the probe still runs; null or
   * absent: the breaker lets admission through.
   */
  breaker_hold?: { until: number | null; probe_id: string | null } | null;
  /**
   * A pool's budget: not a column but the first spent limit of the pools the agent draws from
   * (src/engine/pool-budget.ts); null or absent: none is spent.
   */
  pool_budget_spent?: { pool: string; spent: LimitStatus } | null;
}

export type Hold =
  | { reason: 'agent_paused'; by: string; why: string; since: number }
  | { reason: 'lapse_hold'; since: number; lapsed: number }
  | { reason: 'budget_spent'; spent: LimitStatus }
  | { reason: 'pool_budget_spent'; pool: string; spent: LimitStatus }
  | { reason: 'breaker_open'; until: number | null; probe_id: string | null };

/**
 * The agent-row columns that say whether a hold or a completion side effect can apply to an agent
 * at all (src/domain/fast-paths.ts turns them into the agent's fast-path facts).
 */
export interface AgentFactInputs {
  name: string;
  paused_at: number | null;
  lapse_hold_at: number | null;
  budget: string | null;
  breaker_config: string | null;
  breaker_state: BreakerState;
  breaker_consecutive: number;
  breaker_recent: string;
  /** Whether an enabled subscription has this agent as its source. */
  subscribed: boolean;
  /** Whether a pool it draws from has a budget (its admissions read it, its completions spend it). */
  pool_budgeted: boolean;
  /** The pools it draws from (JSON, src/domain/pools.ts) and its throttle (JSON); null: none. */
  pools: string | null;
  throttle: string | null;
  /** Per-key limits (src/domain/flow.ts). */
  key_max_parallel?: number | null;
  key_overrides?: string | null;
  key_throttle?: string | null;
}

/**
 * One hold: `decide` says whether it holds the agent now (on the row admission locked, with the
 * facts it read); `mayApply` says whether it can hold this agent at all, from the agent row alone.
 * Where `mayApply` is false for every hold, a claim may take the fast path (the store's claimMany,
 * one statement on PostgreSQL) without running `decide`; so `mayApply` must be true whenever
 * `decide` could answer a hold.
 */
export interface HoldRule {
  readonly reason: string;
  decide(a: AdmissionState): Hold | null;
  mayApply(a: AgentFactInputs): boolean;
}

/** The holds, in the order admission checks them (ADMISSION_HOLDS names them). A new hold goes here. */
const HOLD_RULES: HoldRule[] = [
  {
    reason: 'agent_paused',
    decide: (a) =>
      a.paused_at === null
        ? null
        : { reason: 'agent_paused', by: a.paused_by ?? 'unknown', why: a.paused_reason ?? '', since: Number(a.paused_at) },
    mayApply: (a) => a.paused_at !== null,
  },
  {
    reason: 'lapse_hold',
    decide: (a) =>
      a.lapse_hold_at === null ? null : { reason: 'lapse_hold', since: Number(a.lapse_hold_at), lapsed: Number(a.lapse_hold_count ?? 0) },
    mayApply: (a) => a.lapse_hold_at !== null,
  },
  {
    reason: 'budget_spent',
    decide: (a) => (a.budget_spent ? { reason: 'budget_spent', spent: a.budget_spent } : null),
    mayApply: (a) => a.budget !== null,
  },
  {
    reason: 'pool_budget_spent',
    decide: (a) => (a.pool_budget_spent ? { reason: 'pool_budget_spent', ...a.pool_budget_spent } : null),
    mayApply: (a) => a.pool_budgeted,
  },
  {
    reason: 'breaker_open',
    decide: (a) => (a.breaker_hold ? { reason: 'breaker_open', until: a.breaker_hold.until, probe_id: a.breaker_hold.probe_id } : null),
    // Open, or half-open: admission may turn it half-open and admit one probe, which only the
    // transaction records. Off, or closed: nothing to decide.
    mayApply: (a) => a.breaker_config !== null && a.breaker_state !== 'closed',
  },
];

/** The holds in force, in order (the list above, plus any a test added with addHoldRule). */
export function holdRules(): readonly HoldRule[] {
  return HOLD_RULES;
}

/**
 * Add a hold at the end of the list, for tests: it shows that a hold written only here holds on
 * every store (the fast-path facts follow `mayApply`). Returns its removal. Agents' facts are
 * computed when an agent changes, so add it before creating the agents it should hold.
 */
export function addHoldRule(rule: HoldRule): () => void {
  HOLD_RULES.push(rule);
  return () => {
    const at = HOLD_RULES.indexOf(rule);
    if (at >= 0) HOLD_RULES.splice(at, 1);
  };
}

/** May this agent admit now? null: yes; otherwise the first hold, with its facts. */
export function admissionHold(a: AdmissionState): Hold | null {
  for (const rule of HOLD_RULES) {
    const hold = rule.decide(a);
    if (hold) return hold;
  }
  return null;
}

/** A running execution holding a seat, as `waiting` names it. */
export interface SeatHolder {
  execution_id: string;
  lease_owner: string | null;
  lease_expires_at: string | null;
  started_at: string | null;
  running_seconds: number | null;
}

/** The wire shape of `waiting` (GET /v1/executions/{id}); src/api/schemas.ts validates it. */
export interface WaitingView {
  reason: WaitingReason;
  /** The reason and its facts in one sentence. */
  summary: string;
  /** How many queued executions of the agent come before it; `ahead_capped`: there are at least that many. */
  ahead: number;
  ahead_capped: boolean;
  /** When the reaper fails it as `backlog_expired` if it is still queued (null: never). */
  backlog_expires_at: string | null;
  run_after: string | null;
  paused: { by: string; reason: string; since: string } | null;
  /** Held after a shared-cause lapse: since when, and how many leases lapsed together. */
  lapse: { since: string; lapsed: number } | null;
  /** budget_spent: the limit that is spent, and when its window rolls. */
  budget: { metric: string; window: string; limit: number; spent: number; resets_at: string } | null;
  /** breaker_open: until when it stays open (null: half-open, its probe `probe_id` is running). */
  breaker: { until: string | null; probe_id: string | null } | null;
  serial: { serial_key: string; execution_id: string } | null;
  seats: {
    max_parallel: number;
    running: number;
    holders: SeatHolder[];
  } | null;
  /** key_busy / key_throttled: the key, its cap and holders, its throttle and when it next admits. */
  key: {
    key: string;
    max_parallel: number | null;
    running: number;
    holders: SeatHolder[];
    throttle: string | null;
    next_start_at: string | null;
  } | null;
  /** throttled: the agent's throttle, and when it next admits a start. */
  throttle: FlowThrottleView | null;
  /** pool_full, pool_turn, pool_throttled, pool_budget_spent: the pool that limits it. */
  pool: FlowPoolView | null;
  /** Pull agents: when a worker last claimed (to within CLAIM_STAMP_EVERY_MS), or null: never. */
  last_claim_at: string | null;
  /** Push agents: the last failed delivery, when the agent's last completion was a push error. */
  push_error: { execution_id: string; code: string; message: string | null; at: string | null } | null;
}

export const secs = (ms: number) => {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  return `${(s / 3600).toFixed(1)} h`;
};

/** The sentence for a waiting answer; `now` (ms) turns its times into durations. */
export function describeWaiting(w: Omit<WaitingView, 'summary'>, now: number): string {
  const ahead = w.ahead === 0 ? 'it is first in the queue' : `${w.ahead}${w.ahead_capped ? '+' : ''} ahead of it in the queue`;
  const at = (iso: string | null) => (iso === null ? 0 : Date.parse(iso));
  switch (w.reason) {
    case 'run_after':
      return `Not allowed to start before ${w.run_after} (in ${secs(at(w.run_after) - now)}).`;
    case 'agent_paused':
      return `The agent is paused by ${w.paused!.by} since ${w.paused!.since}${w.paused!.reason ? `: "${w.paused!.reason}"` : ''}; it admits nothing until resumed (${ahead}).`;
    case 'lapse_hold':
      return `${w.lapse!.lapsed} of the agent's leases lapsed together at ${w.lapse!.since} (its workers went away at once); it admits nothing until one of its workers claims or heartbeats again (${ahead}).`;
    case 'budget_spent':
      return `The agent's ${w.budget!.metric} budget per ${w.budget!.window} is spent (${w.budget!.spent} of ${w.budget!.limit}); it admits nothing until the window rolls at ${w.budget!.resets_at} (in ${secs(at(w.budget!.resets_at) - now)}) or the limit is raised (${ahead}).`;
    case 'breaker_open':
      return w.breaker!.until !== null
        ? `The agent's circuit breaker is open after repeated failures; it admits nothing until ${w.breaker!.until} (in ${secs(at(w.breaker!.until) - now)}), then one probe (${ahead}).`
        : `The agent's circuit breaker is half-open: its probe ${w.breaker!.probe_id} is running, and its outcome decides whether admission resumes (${ahead}).`;
    case 'serial_busy':
      return `A run with the same serial key (${w.serial!.serial_key}) is running: ${w.serial!.execution_id}; this one starts after it.`;
    case 'throttled':
    case 'pool_full':
    case 'pool_turn':
    case 'pool_throttled':
    case 'pool_budget_spent':
      return describeFlowWaiting(w, ahead, now);
    case 'seats_taken':
      return `All ${w.seats!.max_parallel} seats are taken (${w.seats!.running} running); ${ahead}.`;
    case 'key_busy':
      return `Its key ${w.key!.key} has all ${w.key!.max_parallel} of its seats taken (${w.key!.running} running: ${w.key!.holders.map((h) => h.execution_id).join(', ')}); ${ahead}.`;
    case 'key_throttled':
      return `Its key ${w.key!.key} is throttled (${w.key!.throttle}); it next admits at ${w.key!.next_start_at} (in ${secs(at(w.key!.next_start_at) - now)}); ${ahead}.`;
    case 'no_worker':
      return w.last_claim_at === null
        ? `Seats are free but no worker has ever claimed for this agent; start one (${ahead}).`
        : `Seats are free but no worker has claimed for this agent for ${secs(now - at(w.last_claim_at))} (last at ${w.last_claim_at}); ${ahead}.`;
    case 'push_failing':
      return `Seats are free but the agent's push target is failing: ${w.push_error!.code}${w.push_error!.message ? `: ${w.push_error!.message}` : ''} (${ahead}).`;
    case 'next_in_line':
      return `Seats are free and the agent is served: it starts at the next claim (${ahead}).`;
  }
}

/** The wire shape of an agent's `hold` (GET /v1/agents): what stops it admitting now, in words. */
export interface HoldView {
  reason: AdmissionHold;
  summary: string;
  /** When it ends by itself (a budget window rolling, a breaker's cool-down); null: it waits for someone. */
  until: string | null;
}

/** An agent's hold for its answer and the dashboard's overview; `now` (ms) turns times into durations. */
export function holdView(h: Hold | null, now: number): HoldView | null {
  if (!h) return null;
  const iso = (ms: number) => new Date(ms).toISOString();
  switch (h.reason) {
    case 'agent_paused':
      return { reason: h.reason, until: null, summary: `paused by ${h.by} since ${iso(h.since)}${h.why ? `: "${h.why}"` : ''}` };
    case 'lapse_hold':
      return {
        reason: h.reason,
        until: null,
        summary: `held: ${h.lapsed} leases lapsed together at ${iso(h.since)}; until one of its workers claims or heartbeats`,
      };
    case 'budget_spent': {
      const s = h.spent;
      return {
        reason: h.reason,
        until: iso(s.resets_at),
        summary: `${s.metric} budget per ${s.window} spent (${s.spent} of ${s.limit}); until the window rolls in ${secs(s.resets_at - now)}`,
      };
    }
    case 'pool_budget_spent': {
      const s = h.spent;
      return {
        reason: h.reason,
        until: iso(s.resets_at),
        summary: `pool ${h.pool}'s ${s.metric} budget per ${s.window} spent (${s.spent} of ${s.limit}); until the window rolls in ${secs(s.resets_at - now)}`,
      };
    }
    case 'breaker_open':
      return h.until !== null
        ? { reason: h.reason, until: iso(h.until), summary: `breaker open; a probe in ${secs(h.until - now)}` }
        : { reason: h.reason, until: null, summary: `breaker half-open: probe ${h.probe_id} decides` };
  }
}
