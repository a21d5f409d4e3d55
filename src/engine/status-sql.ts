import { sql, type RawBuilder } from 'kysely';
import { isTerminal, TERMINAL_STATES, type ExecutionStatus } from '../domain/states.ts';

/**
 * A status written into the SQL text rather than bound. Every read that filters on status uses
 * this, for two reasons measured on a long history:
 * - SQLite can use a partial index (`WHERE status = 'queued'`, `status IN ('queued', 'running')`)
 *   only when the query carries the same term with the same literal: a bound `status = ?` keeps
 *   it off them, and a count of queued rows then walks the agent's whole history;
 * - SQLite re-prepares a statement on every run when such a term is a bound parameter (the
 *   submit insert cost 137 µs of CPU bound, 65 µs literal).
 * The values are the closed set from domain/states.ts, never user text. Guarded writes
 * (`WHERE id = ? AND status = ?`) keep bound values: they seek by primary key anyway.
 */
export function statusIs<S extends ExecutionStatus>(status: S): RawBuilder<S> {
  return sql.lit(status);
}

/**
 * `status IN ('queued', 'running')`, in the order the partial indexes executions_schedule_open
 * and executions_webhook_open are declared with (SQLite matches the term as written).
 */
export const LIVE_STATUSES = [statusIs('queued'), statusIs('running')] as const;

/**
 * `status IN ('succeeded', 'failed', 'cancelled', 'skipped')`, as the partial indexes
 * executions_status_recent and executions_agent_status_recent are declared (migration 0020: they
 * hold finished rows only, so a row's claim and its completion no longer move it through them). A
 * read by one finished status carries this term beside `status = '…'`: SQLite uses a partial index
 * only when the query says its WHERE as written.
 */
const FINISHED = sql<boolean>`${sql.ref('status')} in (${sql.join(TERMINAL_STATES.map((s) => sql.lit(s)))})`;

/**
 * Columns said as expressions that no index is in the order of, for reading live rows (queued,
 * running) in order: they are few, found through their partial indexes and sorted. Ordered by the
 * column itself, SQLite without statistics walks an index in that order instead (the primary key
 * for id, executions_recent for created_at) past every finished row; compared by the column
 * (`agent = ?`), it seeks the agent's whole history in executions_agent_recent and filters it.
 * Each expression sorts and compares as its column does (same collation, same numbers).
 */
export const unindexed = {
  id: sql<string>`${sql.ref('id')} || ''`,
  agent: sql<string>`${sql.ref('agent')} || ''`,
  created_at: sql<number>`${sql.ref('created_at')} + 0`,
};

/** `status = '…'`, and FINISHED with it when the status is a finished one: the rows of one status, through the indexes made for them. */
export function hasStatus(status: ExecutionStatus): RawBuilder<boolean> {
  const is = sql<boolean>`${sql.ref('status')} = ${statusIs(status)}`;
  return isTerminal(status) ? sql<boolean>`${is} and ${FINISHED}` : is;
}

/**
 * `enabled = 1` as text, for the same two reasons: subscriptions_source and schedules_due are
 * partial indexes on it. A completion reads whether its agent has subscriptions with this term
 * (measured: 9.6 µs bound, 2.8 µs literal).
 */
export const ENABLED = sql.lit(1);
