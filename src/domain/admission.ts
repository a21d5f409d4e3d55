/**
 * Why an agent may not admit, and why a queued execution is not running: the closed lists,
 * defined once for the engine, the API, the CLI, MCP and the dashboard.
 *
 * Glossary
 * - hold: an agent-level reason the admission transaction refuses to admit anything for that
 *   agent (today: paused). `admissionHold` is the one place that decides it; admit.ts calls it on
 *   the agent row it holds locked, and the `waiting` answer calls it on the same columns, so the
 *   two never disagree. Later holds (circuit breaker, budget, shared-cause lapse) join the list
 *   and that function, nothing else.
 * - waiting: the first reason a queued execution is not running, with the facts behind it.
 */

/** Agent-level holds, in the order admission checks them. */
export const ADMISSION_HOLDS = Object.freeze(['agent_paused'] as const);
export type AdmissionHold = (typeof ADMISSION_HOLDS)[number];

/**
 * Every reason a queued execution may be waiting, in the order they are checked: the first that
 * applies is the answer.
 * - run_after: not allowed to start yet.
 * - agent_paused: an operator paused the agent (a hold).
 * - serial_busy: a run with the same serial key (a schedule's overlap policy 'queue') is running.
 * - seats_taken: every seat (max_parallel) is held by a running execution.
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

/**
 * A pull agent with free seats and no claim for this long has no worker serving it (`no_worker`).
 * Six stamp intervals: a long-polling worker re-checks at least every second, so a live one is
 * never reported idle; a worker busy on long tasks with none to spare is, and that is the fact.
 */
export const NO_WORKER_AFTER_MS = 30_000;

/** Positions in a queue are counted up to this many (the answer then says "1000+"). */
export const AHEAD_COUNT_CAP = 1_000;

/** Running executions listed by name in a `seats_taken` answer (the count covers the rest). */
export const SEAT_HOLDERS_SHOWN = 20;

/** The columns of an agent row a hold is decided from. */
export interface AdmissionState {
  paused_at: number | null;
  paused_by: string | null;
  paused_reason: string | null;
}

export type Hold = { reason: 'agent_paused'; by: string; why: string; since: number };

/** May this agent admit now? null: yes; otherwise the first hold, with its facts. */
export function admissionHold(a: AdmissionState): Hold | null {
  if (a.paused_at !== null)
    return { reason: 'agent_paused', by: a.paused_by ?? 'unknown', why: a.paused_reason ?? '', since: Number(a.paused_at) };
  return null;
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
  serial: { serial_key: string; execution_id: string } | null;
  seats: {
    max_parallel: number;
    running: number;
    holders: Array<{
      execution_id: string;
      lease_owner: string | null;
      lease_expires_at: string | null;
      started_at: string | null;
      running_seconds: number | null;
    }>;
  } | null;
  /** Pull agents: when a worker last claimed (to within CLAIM_STAMP_EVERY_MS), or null: never. */
  last_claim_at: string | null;
  /** Push agents: the last failed delivery, when the agent's last completion was a push error. */
  push_error: { execution_id: string; code: string; message: string | null; at: string | null } | null;
}

const secs = (ms: number) => {
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
    case 'serial_busy':
      return `A run with the same serial key (${w.serial!.serial_key}) is running: ${w.serial!.execution_id}; this one starts after it.`;
    case 'seats_taken':
      return `All ${w.seats!.max_parallel} seats are taken (${w.seats!.running} running); ${ahead}.`;
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
