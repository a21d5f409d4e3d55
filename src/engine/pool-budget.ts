import { sql } from 'kysely';
import { budgetStatus, budgetWindows, firstSpent, parseBudget, spendOf, windowOf, type LimitStatus } from '../domain/budget.ts';
import { parsePools } from '../domain/pools.ts';
import type { ExecutionRow } from '../store/schema.ts';
import { forgetOldMinutes, isFirstSpend, readCurrentWindows } from './budget.ts';
import type { Executor } from './transitions/stamp.ts';

/**
 * Pool budgets: the same windows and limits as an agent's (src/domain/budget.ts), spent by the
 * completions of every agent that draws from the pool, kept in pool_budget_ledger. Every statement
 * is a primary-key seek or upsert on (pool, window_kind, window_start).
 */

/** A pool's budget now: each limit with its current window's spending (empty: no budget). */
export async function poolBudgetStatus(db: Executor, pool: { name: string; budget: string | null }, now: number): Promise<LimitStatus[]> {
  const budget = parseBudget(pool.budget);
  return budget ? budgetStatus(budget, await readCurrentWindows(db, pool.name, budget, now, 'pool'), now) : [];
}

/**
 * The first spent limit of the pools an agent draws from (pools in name order), or null. Unlocked,
 * as an agent's own budget: admissions do not spend it, completions do, so a read under any lock
 * sees no less than the spending committed before it.
 */
export async function poolBudgetSpent(
  db: Executor,
  poolsJson: string | null,
  now: number,
): Promise<{ pool: string; spent: LimitStatus } | null> {
  const names = parsePools(poolsJson);
  if (names.length === 0) return null;
  const pools = await db
    .selectFrom('pools')
    .select(['name', 'budget'])
    .where('name', 'in', names)
    .where('budget', 'is not', null)
    .execute();
  for (const p of pools.sort((a, b) => (a.name < b.name ? -1 : 1))) {
    const budget = parseBudget(p.budget);
    const spent = budget && firstSpent(budget, await readCurrentWindows(db, p.name, budget, now, 'pool'), now);
    if (spent) return { pool: p.name, spent };
  }
  return null;
}

/**
 * Add a finished execution's spending to the current windows of every pool with a budget its agent
 * draws from, in the completion's transaction. `poolsJson`: the agent's pools column.
 */
export async function accruePoolBudgets(tx: Executor, row: ExecutionRow, now: number, poolsJson: string | null): Promise<void> {
  const names = parsePools(poolsJson);
  if (names.length === 0) return;
  const pools = await tx
    .selectFrom('pools')
    .select(['name', 'budget'])
    .where('name', 'in', names)
    .where('budget', 'is not', null)
    .execute();
  if (pools.length === 0) return;
  const spend = spendOf(parseUsage(row.usage), row.duration_ms === null ? null : Number(row.duration_ms));
  for (const p of pools.sort((a, b) => (a.name < b.name ? -1 : 1))) {
    const budget = parseBudget(p.budget);
    if (!budget) continue;
    for (const w of budgetWindows(budget)) {
      const start = windowOf(now, w, budget.time_zone).start;
      const after = await tx
        .insertInto('pool_budget_ledger')
        .values({ pool: p.name, window_kind: w, window_start: start, ...spend, updated_at: now })
        .onConflict((oc) =>
          oc.columns(['pool', 'window_kind', 'window_start']).doUpdateSet({
            cost_usd: sql`pool_budget_ledger.cost_usd + excluded.cost_usd`,
            total_tokens: sql`pool_budget_ledger.total_tokens + excluded.total_tokens`,
            run_ms: sql`pool_budget_ledger.run_ms + excluded.run_ms`,
            updated_at: now,
          }),
        )
        .returning(['cost_usd', 'total_tokens', 'run_ms'])
        .executeTakeFirstOrThrow();
      if (w === 'minute' && isFirstSpend(after, spend)) await forgetOldMinutes(tx, 'pool_budget_ledger', p.name, start);
    }
  }
}

/** The agent's pools column, for a completion that did not read it. */
export async function agentPoolsColumn(db: Executor, agent: string): Promise<string | null> {
  return (await db.selectFrom('agents').select('pools').where('name', '=', agent).executeTakeFirst())?.pools ?? null;
}

function parseUsage(usage: string | null): unknown {
  if (usage === null) return undefined;
  try {
    return JSON.parse(usage);
  } catch {
    return undefined;
  }
}
