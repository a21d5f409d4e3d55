import { sql } from 'kysely';
import {
  BUDGET_ALERT_RATIO,
  budgetWindows,
  parseBudget,
  spendOf,
  spentOn,
  windowOf,
  type Budget,
  type BudgetMetric,
  type BudgetWindow,
  type Spend,
  type WindowSpend,
} from '../domain/budget.ts';
import type { AlertSinkKind } from '../domain/canary.ts';
import type { ExecutionRow } from '../store/schema.ts';
import type { Executor } from './transitions/stamp.ts';
import { queueAlerts } from './alerts.ts';

/**
 * The budget ledger (src/domain/budget.ts): read by admission and the budget
 * answer, added to by completions. Every statement is a primary-key seek or upsert on
 * (agent, window_kind, window_start); none reads the history of executions.
 */

/** Whose ledger: an agent's (agent_budget_ledger) or a pool's (pool_budget_ledger), keyed alike by owner and window. */
export type BudgetLedger = 'agent' | 'pool';

/** The ledger rows of the budget's current windows: one indexed read (at most four keys). */
export async function readCurrentWindows(
  db: Executor,
  owner: string,
  budget: Budget,
  now: number,
  ledger: BudgetLedger = 'agent',
): Promise<WindowSpend[]> {
  const keys = budgetWindows(budget).map((w) => ({ w, start: windowOf(now, w, budget.time_zone).start }));
  // A pool's ledger remembers no alert (pools alert nobody): its rows read alerted_at null.
  const alerted = ledger === 'pool' ? sql<number | null>`null` : sql<number | null>`${sql.ref('alerted_at')}`;
  const rows = await db
    .selectFrom(ledger === 'pool' ? 'pool_budget_ledger' : 'agent_budget_ledger')
    .select(['window_kind', 'window_start', 'cost_usd', 'total_tokens', 'run_ms', alerted.as('alerted_at')])
    .where(sql.ref(ledger), '=', owner)
    .where((eb) => eb.or(keys.map((k) => eb.and([eb('window_kind', '=', k.w), eb('window_start', '=', k.start)]))))
    .execute();
  return rows.map(toSpend);
}

const toSpend = (r: WindowSpend): WindowSpend => ({
  window_kind: r.window_kind,
  window_start: Number(r.window_start),
  cost_usd: Number(r.cost_usd),
  total_tokens: Number(r.total_tokens),
  run_ms: Number(r.run_ms),
  alerted_at: r.alerted_at === null ? null : Number(r.alerted_at),
});

/** An 80 % crossing: the first in its window (the ledger row's alerted_at was null until now). */
export interface BudgetAlert {
  agent: string;
  metric: BudgetMetric;
  window: BudgetWindow;
  limit: number;
  spent: number;
  window_start: number;
  resets_at: number;
  at: number;
}

/**
 * Add a finished execution's spending to its agent's current windows, inside the completion's
 * transaction, and mark the 80 % alert of any window that just reached it. A no-op (one
 * primary-key read) for an agent without a budget. The upsert locks the window's row until
 * commit, so concurrent completions add in turn and exactly one of them sees alerted_at null.
 */
export async function accrueBudget(
  tx: Executor,
  row: ExecutionRow,
  now: number,
  sinks: readonly AlertSinkKind[],
  /** The agent's budget column when the caller read it already (see readCompletionProfile); undefined: read it here. */
  known?: string | null,
): Promise<BudgetAlert[]> {
  const text =
    known !== undefined ? known : (await tx.selectFrom('agents').select('budget').where('name', '=', row.agent).executeTakeFirst())?.budget;
  const budget = parseBudget(text);
  if (!budget) return [];
  const spend = spendOf(parseUsage(row.usage), row.duration_ms === null ? null : Number(row.duration_ms));
  const alerts: BudgetAlert[] = [];
  for (const w of budgetWindows(budget)) {
    const { start, end } = windowOf(now, w, budget.time_zone);
    const after = await tx
      .insertInto('agent_budget_ledger')
      .values({ agent: row.agent, window_kind: w, window_start: start, ...spend, updated_at: now })
      .onConflict((oc) =>
        oc.columns(['agent', 'window_kind', 'window_start']).doUpdateSet({
          cost_usd: sql`agent_budget_ledger.cost_usd + excluded.cost_usd`,
          total_tokens: sql`agent_budget_ledger.total_tokens + excluded.total_tokens`,
          run_ms: sql`agent_budget_ledger.run_ms + excluded.run_ms`,
          updated_at: now,
        }),
      )
      .returning(['window_kind', 'window_start', 'cost_usd', 'total_tokens', 'run_ms', 'alerted_at'])
      .executeTakeFirstOrThrow();
    if (w === 'minute' && isFirstSpend(after, spend)) await forgetOldMinutes(tx, 'agent_budget_ledger', row.agent, start);
    if (after.alerted_at !== null) continue;
    const crossed = budget.limits.find((l) => l.window === w && spentOn(l.metric, toSpend(after)) >= BUDGET_ALERT_RATIO * l.limit);
    if (!crossed) continue;
    await tx
      .updateTable('agent_budget_ledger')
      .set({ alerted_at: now })
      .where('agent', '=', row.agent)
      .where('window_kind', '=', w)
      .where('window_start', '=', start)
      .execute();
    const alert: BudgetAlert = {
      agent: row.agent,
      metric: crossed.metric,
      window: w,
      limit: crossed.limit,
      spent: spentOn(crossed.metric, toSpend(after)),
      window_start: start,
      resets_at: end,
      at: now,
    };
    // Through the canary's alert sinks (it delivers canary_alerts rows, with retries), queued in
    // this transaction: the alert and the mark that it fired commit together.
    await queueAlerts(tx, sinks, { invariant: BUDGET_ALERT, transition: 'violated', now, body: (sink) => budgetAlertBody(sink, alert) });
    alerts.push(alert);
  }
  return alerts;
}

/**
 * Minute windows of a ledger are kept for a day (the budget answers read the current window
 * only): the first completion of each new minute drops its owner's minute rows older than that, a
 * primary-key range seek, so a ledger holds at most 1,440 of them per agent or pool however old
 * the store.
 */
export const MINUTE_ROWS_KEPT_MS = 86_400_000;

/** Whether an upserted window row holds exactly this spend: the completion made the row (or all before it spent nothing). */
export function isFirstSpend(after: Pick<WindowSpend, 'cost_usd' | 'total_tokens' | 'run_ms'>, spend: Spend): boolean {
  return (
    Number(after.cost_usd) === spend.cost_usd && Number(after.total_tokens) === spend.total_tokens && Number(after.run_ms) === spend.run_ms
  );
}

/** Drop `owner`'s minute rows of `table` older than MINUTE_ROWS_KEPT_MS before `start`. */
export async function forgetOldMinutes(
  tx: Executor,
  table: 'agent_budget_ledger' | 'pool_budget_ledger',
  owner: string,
  start: number,
): Promise<void> {
  const q =
    table === 'agent_budget_ledger'
      ? tx.deleteFrom('agent_budget_ledger').where('agent', '=', owner)
      : tx.deleteFrom('pool_budget_ledger').where('pool', '=', owner);
  await q
    .where('window_kind', '=', 'minute')
    .where('window_start', '<', start - MINUTE_ROWS_KEPT_MS)
    .execute();
}

/** The `invariant` column of a budget alert row (it names what alerted, as BREAKER_ALERT does). */
export const BUDGET_ALERT = 'budget';

/** The body one sink receives: the agent, the limit and its spending. */
export function budgetAlertBody(sink: AlertSinkKind, a: BudgetAlert): Record<string, unknown> {
  const pct = Math.round((a.spent / a.limit) * 100);
  const resets = new Date(a.resets_at).toISOString();
  if (sink === 'slack') {
    return {
      text: `:warning: Baton: agent ${a.agent} has spent ${pct} % of its ${a.metric} budget per ${a.window} (${a.spent} of ${a.limit}); resets at ${resets}`,
    };
  }
  return {
    event: 'budget.threshold',
    agent: a.agent,
    metric: a.metric,
    window: a.window,
    limit: a.limit,
    spent: a.spent,
    ratio: a.spent / a.limit,
    window_start: new Date(a.window_start).toISOString(),
    resets_at: resets,
    at: new Date(a.at).toISOString(),
  };
}

function parseUsage(usage: string | null): unknown {
  if (usage === null) return undefined;
  try {
    return JSON.parse(usage);
  } catch {
    return undefined;
  }
}
