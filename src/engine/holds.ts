import { admissionHold, type AdmissionState, type Hold } from '../domain/admission.ts';
import { firstSpent, parseBudget } from '../domain/budget.ts';
import { breakerAdmission, type BreakerColumns } from '../domain/breaker.ts';
import { readCurrentWindows } from './budget.ts';
import { poolBudgetSpent } from './pool-budget.ts';
import type { Executor } from './transitions/stamp.ts';

/** The agent columns a hold is decided from. */
export type HoldColumns = {
  name: string;
  budget: string | null;
  pools: string | null;
  fast_complete?: number;
  /** The fact poolBudgeted (src/engine/fast-path-facts.ts), where the caller read it after the agent's lock. */
  pool_budgeted?: boolean;
} & Omit<AdmissionState, 'budget_spent' | 'breaker_hold' | 'pool_budget_spent'> &
  BreakerColumns;

/**
 * Whether `agent` may admit at `now`, decided as admission decides it (src/domain/admission.ts):
 * paused, held after a shared-cause lapse, a budget spent (its current windows' ledger rows, a
 * primary-key seek, agents with a budget only), the breaker open (half-open: whether its probe
 * still runs, a primary-key seek), or a pool's budget spent (read only where the row's fact says a
 * pool may have one). `hold` null: nothing holds it; `probe`: the next admission is
 * the half-open breaker's one probe. Admission calls it on the agent row it locked; `baton why`
 * and the canary on a row they read.
 */
export async function admissionNow(db: Executor, agent: HoldColumns, now: number): Promise<{ hold: Hold | null; probe: boolean }> {
  const budget = parseBudget(agent.budget);
  const budget_spent = budget && firstSpent(budget, await readCurrentWindows(db, agent.name, budget, now), now);
  const probeRunning =
    agent.breaker_state === 'half_open' &&
    agent.breaker_probe_id !== null &&
    (await db.selectFrom('executions').select('status').where('id', '=', agent.breaker_probe_id).executeTakeFirst())?.status === 'running';
  const breaker = breakerAdmission(agent, now, probeRunning);
  // fast_complete is 0 wherever a pool of the agent has a budget (its pool_budget fact,
  // src/domain/fast-paths.ts, written under the agent's lock by whatever sets a pool's budget):
  // a row that says 1 needs no read of its pools, nor does one whose pool_budgeted fact was read false.
  const unbudgeted = Number(agent.fast_complete) === 1 || agent.pool_budgeted === false;
  const pool_budget_spent = unbudgeted ? null : await poolBudgetSpent(db, agent.pools, now);
  // Object.assign, not `{ ...agent, more }`: V8's slow path on Node 20 (create.ts queuedValues).
  return {
    hold: admissionHold(Object.assign({}, agent, { budget_spent, pool_budget_spent, breaker_hold: breaker.hold })),
    probe: breaker.probe,
  };
}
