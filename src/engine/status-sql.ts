import { sql, type RawBuilder } from 'kysely';
import type { ExecutionStatus } from '../domain/states.ts';

/**
 * A status written into the SQL text rather than bound. Every read that filters on status uses
 * this, for two reasons that show on a long history:
 * - SQLite can use a partial index (`WHERE status = 'queued'`, `status IN ('queued', 'running')`)
 *   only when the query carries the same term with the same literal: a bound `status = ?` keeps
 *   it off them, and a count of queued rows then walks the agent's whole history;
 * - SQLite re-prepares a statement on every run when such a term is a bound parameter (the
 *   submit insert cost about twice the CPU bound).
 * The values are the closed set from domain/states.ts, never user text. Guarded writes
 * (`WHERE id = ? AND status = ?`) keep bound values: they seek by primary key anyway.
 */
export function statusIs<S extends ExecutionStatus>(status: S): RawBuilder<S> {
  return sql.lit(status);
}

/**
 * A guard's status column as an expression no index answers (`status || ''`: the same text), for
 * a guarded write that finds its rows by primary key: it keeps to that key whatever the
 * statistics say. completeManyWithLease (PostgreSQL, UPDATE … FROM unnest) guards on
 * `status IN ('running', 'queued')`; on a store analysed when few rows were live (an old store's
 * normal case: autovacuum analyses after a tenth of the table changed), PostgreSQL estimated one
 * such row, read them all through executions_status_recent (led by status) and joined the given
 * ids to them: every queued row of every agent read per batch of completions (docs/benchmarks.md,
 * "Claims and completions at 1M").
 */
export function statusUnindexed(column: 'status' | `${string}.status`): RawBuilder<string> {
  return sql<string>`(${sql.ref(column)} || '')`;
}

/**
 * `status IN ('queued', 'running')`, in the order the partial indexes executions_schedule_open
 * and executions_webhook_open are declared with (SQLite matches the term as written).
 */
export const LIVE_STATUSES = [statusIs('queued'), statusIs('running')] as const;

/**
 * `enabled = 1` as text, for the same two reasons: subscriptions_source and schedules_due are
 * partial indexes on it. A completion reads whether its agent has subscriptions with this term
 * (several times cheaper than bound).
 */
export const ENABLED = sql.lit(1);
