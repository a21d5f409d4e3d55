/**
 * The fast paths' facts: whether a claim or a completion may skip the engine's transaction and
 * take the store's one-statement path (StoreAdapter.fastPaths: one round trip on PostgreSQL).
 * The rules stay here, in TypeScript; the store's statements read only the facts these functions
 * compute, kept on the rows by the engine (src/engine/fast-path-facts.ts) wherever an input
 * changes. A new hold is an entry of HOLD_RULES (admission.ts); a new completion side effect is an
 * entry of COMPLETION_SIDE_EFFECTS below. Neither touches SQL.
 */

import { holdRules, type AgentFactInputs } from './admission.ts';
import { parseBreakerConfig } from './breaker.ts';
import { FLOW_LIMITS } from './flow.ts';

/** The columns an execution is created with that say whether its completion can cause anything. */
export interface ExecutionFactInputs {
  group_id: string | null;
}

/** The outcome a completion reports. */
export interface OutcomeFactInputs {
  status: string;
}

/**
 * Something a completion may cause besides its own row, which only the engine's transaction does.
 * Each says, for the scope it depends on, whether it can apply; a completion takes the fast path
 * only where none can.
 */
export type CompletionSideEffect =
  | { readonly name: string; readonly scope: 'agent'; mayApply(a: AgentFactInputs): boolean }
  | { readonly name: string; readonly scope: 'execution'; mayApply(e: ExecutionFactInputs): boolean }
  | { readonly name: string; readonly scope: 'outcome'; mayApply(o: OutcomeFactInputs): boolean };

/** A breaker that a success leaves as it is: off, or closed with its whole window successes. */
function breakerSteady(a: AgentFactInputs): boolean {
  const config = parseBreakerConfig(a.breaker_config);
  if (config === null) return true;
  return a.breaker_state === 'closed' && Number(a.breaker_consecutive) === 0 && a.breaker_recent === '0'.repeat(config.window);
}

/** Every completion side effect. A new one goes here. */
export const COMPLETION_SIDE_EFFECTS: readonly CompletionSideEffect[] = Object.freeze([
  // A failure may be retried by its policy, and counts toward the breaker.
  { name: 'retry', scope: 'outcome', mayApply: (o: OutcomeFactInputs) => o.status === 'failed' },
  // Spending is added to the budget's ledger.
  { name: 'budget', scope: 'agent', mayApply: (a: AgentFactInputs) => a.budget !== null },
  // Spending is added to the ledgers of the pools it draws from that have a budget.
  { name: 'pool_budget', scope: 'agent', mayApply: (a: AgentFactInputs) => a.pool_budgeted },
  // The outcome is counted on the breaker (a success shifts its window, may close it).
  { name: 'breaker', scope: 'agent', mayApply: (a: AgentFactInputs) => !breakerSteady(a) },
  // A chained task may start (composition/chains.ts).
  { name: 'chains', scope: 'agent', mayApply: (a: AgentFactInputs) => a.subscribed },
  // The group's progress, and perhaps its join (composition/groups.ts).
  { name: 'group', scope: 'execution', mayApply: (e: ExecutionFactInputs) => e.group_id !== null },
] as CompletionSideEffect[]);

/** The agent's facts, as stored: 1 where the fast path may be taken, else 0. */
export interface AgentFacts {
  /** No hold and no flow limit (FLOW_LIMITS) can apply: a claim may be decided by the store's claimMany. */
  fast_claim: number;
  /** No agent-scoped completion side effect can apply. */
  fast_complete: number;
}

const bit = (b: boolean) => (b ? 1 : 0);

export function agentFacts(a: AgentFactInputs): AgentFacts {
  return {
    fast_claim: bit(!holdRules().some((h) => h.mayApply(a)) && !FLOW_LIMITS.some((l) => l.mayApply(a))),
    fast_complete: bit(!COMPLETION_SIDE_EFFECTS.some((s) => s.scope === 'agent' && s.mayApply(a))),
  };
}

/** Every rule that reads the agent row: each hold's, flow limit's and agent-scoped side effect's `mayApply`. */
export function agentRules(): Array<(a: AgentFactInputs) => boolean> {
  return [
    ...holdRules().map((h) => (a: AgentFactInputs) => h.mayApply(a)),
    ...FLOW_LIMITS.map((l) => (a: AgentFactInputs) => l.mayApply(a)),
    ...COMPLETION_SIDE_EFFECTS.flatMap((s) => (s.scope === 'agent' ? [(a: AgentFactInputs) => s.mayApply(a)] : [])),
  ];
}

/** The execution's fact, set when it is created: no execution-scoped side effect can apply. */
export function executionFastComplete(e: ExecutionFactInputs): number {
  return bit(!COMPLETION_SIDE_EFFECTS.some((s) => s.scope === 'execution' && s.mayApply(e)));
}

/** Whether this outcome may complete on the fast path (its agent's and execution's facts permitting). */
export function outcomeMayCompleteFast(o: OutcomeFactInputs): boolean {
  return !COMPLETION_SIDE_EFFECTS.some((s) => s.scope === 'outcome' && s.mayApply(o));
}
