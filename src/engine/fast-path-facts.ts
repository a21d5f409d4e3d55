import type { AgentFactInputs } from '../domain/admission.ts';
import { agentFacts, agentRules, type AgentFacts } from '../domain/fast-paths.ts';
import type { ExpressionBuilder } from 'kysely';
import type { StoreAdapter, Tx } from '../store/adapter.ts';
import type { DB } from '../store/schema.ts';
import { preparedQuery } from '../store/prepared-query.ts';
import { ENABLED } from './status-sql.ts';

/** The agent columns the facts are computed from (src/domain/fast-paths.ts). */
const FACT_COLUMNS = [
  'name',
  'paused_at',
  'lapse_hold_at',
  'budget',
  'breaker_config',
  'breaker_state',
  'breaker_consecutive',
  'breaker_recent',
  'key_max_parallel',
  'key_overrides',
  'key_throttle',
  'pools',
  'throttle',
  'fast_claim',
  'fast_complete',
] as const;

/** `subscribed`: whether an enabled subscription has the agent as its source (a read of the agents row). */
export const subscribedAsSource = (eb: ExpressionBuilder<DB, 'agents'>) =>
  eb
    .exists(
      eb.selectFrom('subscriptions').select('id').whereRef('subscriptions.source_agent', '=', 'agents.name').where('enabled', '=', ENABLED),
    )
    .as('subscribed');

/**
 * `pool_budgeted`: whether a pool the agent draws from has a budget. Kept true by the writers of
 * its inputs: an agent's pools (its create and update) and a pool's budget (Pools.update, which
 * refreshes every member).
 */
export const poolBudgeted = (eb: ExpressionBuilder<DB, 'agents'>) =>
  eb
    .exists(
      eb
        .selectFrom('agent_pools')
        .innerJoin('pools', 'pools.name', 'agent_pools.pool')
        .select('agent_pools.pool')
        .whereRef('agent_pools.agent', '=', 'agents.name')
        .where('pools.budget', 'is not', null),
    )
    .as('pool_budgeted');

/** readFactInputs' statement, built once (preparedQuery). */
const factInputs = preparedQuery((tx: Tx, p: { agent: string }) =>
  tx.selectFrom('agents').select(FACT_COLUMNS).select(subscribedAsSource).select(poolBudgeted).where('name', '=', p.agent),
);

/**
 * Keep an agent's fast-path facts (agents.fast_claim, fast_complete) equal to what its row and
 * subscriptions say, in the transaction that changed one of them: pause and resume, a lapse hold
 * set or cleared, the breaker's state or window, the budget, its subscriptions (as their source),
 * its creation and edits. Call it after the change is written, holding the agent row's lock: a
 * caller that wrote the row holds it already; one that did not (a subscription's change) passes
 * `lock`, the store, and the row is locked first (the lock admission takes). The row is read in a
 * statement after the lock was taken, so it sees every change committed by a transaction that held
 * the lock before (PostgreSQL READ COMMITTED takes a new snapshot per statement): of two changes to
 * one agent, the later computes from both. `pending`: agent columns the caller is about to write,
 * folded into the same UPDATE. Returns the facts (undefined when the agent is gone).
 */
export async function refreshFastPathFacts(
  tx: Tx,
  agent: string,
  opts: {
    lock?: StoreAdapter;
    pending?: Partial<Omit<AgentFactInputs, 'subscribed' | 'pool_budgeted' | 'name'>> & Record<string, unknown>;
  } = {},
): Promise<AgentFacts | undefined> {
  if (opts.lock) await opts.lock.lockRows(tx.selectFrom('agents').select('name').where('name', '=', agent), 'admission').execute();
  const pending = opts.pending ?? {};
  const [row] = await factInputs(tx, { agent });
  if (!row) return undefined;
  // EXISTS comes back as 1/0 on SQLite and a boolean on PostgreSQL.
  // Object.assign, not spreads in a literal: V8's slow path on Node 20 (create.ts queuedValues).
  const facts = agentFacts(
    Object.assign({}, row, pending, { subscribed: Boolean(row.subscribed), pool_budgeted: Boolean(row.pool_budgeted) }) as AgentFactInputs,
  );
  const same = Number(row.fast_claim) === facts.fast_claim && Number(row.fast_complete) === facts.fast_complete;
  if (!same || Object.keys(pending).length > 0) {
    await tx
      .updateTable('agents')
      .set(Object.assign({}, pending, facts))
      .where('name', '=', agent)
      .execute();
  }
  return facts;
}

/**
 * Whether changing an agent row from `before` to `after` could change its facts: some hold or
 * agent-scoped completion side effect answers differently on the two. `before` may lack columns
 * the change does not touch (a rule reading only those answers alike on both, and is compared
 * rule by rule, so it hides no other). Lets a frequent writer (the breaker's count) skip
 * refreshFastPathFacts when nothing it wrote matters to the facts.
 */
export function factsMayChange(before: Partial<AgentFactInputs>, after: Partial<AgentFactInputs>): boolean {
  const a = before as AgentFactInputs;
  const b = Object.assign({}, before, after) as AgentFactInputs;
  return agentRules().some((mayApply) => mayApply(a) !== mayApply(b));
}
