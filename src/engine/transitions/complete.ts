import { sql, type Expression, type UpdateQueryBuilder } from 'kysely';
import type { StoredOutcome } from '../../domain/outcomes.ts';
import type { CompletionRequest } from '../../store/fast-paths.ts';
import type { DB, ExecutionRow } from '../../store/schema.ts';
import { statusUnindexed } from '../status-sql.ts';
import { explainRefusal } from './lease.ts';
import { stamp, type Executor } from './stamp.ts';
import { preparedQuery } from '../../store/prepared-query.ts';

/** The values a completion writes, from its outcome. */
function completionValues(outcome: StoredOutcome, now: number, actor: string) {
  return {
    status: outcome.status,
    now,
    actor,
    result: outcome.result,
    error_code: outcome.error?.code ?? null,
    error_message: outcome.error?.message ?? null,
    usage: outcome.usage,
    reason: outcome.error?.code ?? outcome.status,
  };
}
type CompletionValues = ReturnType<typeof completionValues>;

/** What a completion writes: the outcome, the times, the lease's end. */
function completion(v: CompletionValues) {
  return {
    status: v.status,
    completed_at: v.now,
    duration_ms: sql<number>`cast(${v.now} as bigint) - started_at`,
    lease_expires_at: null,
    result: v.result,
    error_code: v.error_code,
    error_message: v.error_message,
    usage: v.usage,
    ...stamp(v.now, v.actor, v.reason),
  };
}

/**
 * running (or re-queued with the same, still-latest token) → succeeded | failed | cancelled.
 * Accepted iff the row is not terminal and `token` is the latest one granted. One guarded
 * statement: the token and the non-terminal status are the compare, the outcome is the set.
 */
export async function completeWithLease(
  db: Executor,
  id: string,
  token: string,
  outcome: StoredOutcome,
  now: number,
  actor: string,
): Promise<ExecutionRow> {
  const [row] = await completeRow(db, { id, token, ...completionValues(outcome, now, actor) });
  return row ?? explainRefusal(db, id, token, true);
}

/**
 * The compare-and-set of every completion, one (values) or many (completeManyWithLease: the columns
 * of its unnest): the execution, the latest lease token granted, a status not yet terminal.
 */
function leaseStillHeld(id: string | Expression<string>, token: string | Expression<string>) {
  return <D extends Pick<DB, 'executions'>, TB extends keyof D, O>(qb: UpdateQueryBuilder<D, 'executions', TB, O>) =>
    qb
      .where(sql.ref('executions.id'), '=', id)
      .where(sql.ref('executions.lease_token'), '=', token)
      // The status as an expression no index answers: the row is reached by its key whatever the
      // statistics (statusUnindexed; completeManyWithLease joins the given ids, and a guard
      // PostgreSQL could seek let stale statistics read every live row instead).
      .where(statusUnindexed('executions.status'), 'in', ['running', 'queued']);
}

/** completeWithLease's statement, built once (preparedQuery). */
const completeRow = preparedQuery((db: Executor, p: { id: string; token: string } & CompletionValues) =>
  db.updateTable('executions').set(completion(p)).$call(leaseStillHeld(p.id, p.token)).returningAll(),
);

/** A completion of completeManyWithLease: its execution, lease token and outcome. */
export interface LeasedCompletion {
  id: string;
  token: string;
  outcome: StoredOutcome;
  now: number;
  actor: string;
}

/**
 * completeWithLease for many executions in one statement (PostgreSQL: their values as arrays, one
 * UPDATE … FROM unnest), each with the same compare-and-set (leaseStillHeld) and the same values
 * written (`completion`, given the array's columns): the rows completed, by id. One missing was refused and
 * nothing was written for it (completeWithLease says why). Ids distinct.
 */
export async function completeManyWithLease(db: Executor, jobs: readonly LeasedCompletion[]): Promise<Map<string, ExecutionRow>> {
  if (jobs.length === 0) return new Map();
  const values = jobs.map((j) => ({ id: j.id, token: j.token, ...completionValues(j.outcome, j.now, j.actor) }));
  const column = <K extends keyof (typeof values)[number]>(k: K) => values.map((v) => v[k]);
  const v = <K extends keyof CompletionValues>(k: K) => sql.ref(`v.${k}`) as unknown as CompletionValues[K];
  const given = sql<{ id: string; token: string }>`unnest(${column('id')}::text[], ${column('token')}::text[], ${column('status')}::text[],
    ${column('now')}::bigint[], ${column('actor')}::text[], ${column('result')}::text[], ${column('error_code')}::text[],
    ${column('error_message')}::text[], ${column('usage')}::text[], ${column('reason')}::text[])`.as<'v'>(
    sql`v(id, token, status, now, actor, result, error_code, error_message, usage, reason)`,
  );
  const rows = await db
    .updateTable('executions')
    .from(given)
    .set(
      completion({
        status: v('status'),
        now: v('now'),
        actor: v('actor'),
        result: v('result'),
        error_code: v('error_code'),
        error_message: v('error_message'),
        usage: v('usage'),
        reason: v('reason'),
      }),
    )
    .$call(leaseStillHeld(sql.ref('v.id'), sql.ref('v.token')))
    .returningAll('executions')
    .execute();
  return new Map(rows.map((r) => [r.id, r as ExecutionRow]));
}

/**
 * A completion as the store's fast path takes it (StoreAdapter.fastPaths.completeMany): the same
 * compare-and-set as completeWithLease, which the store makes only where the execution's and its
 * agent's facts say nothing else follows (src/domain/fast-paths.ts).
 */
export function completionRequest(id: string, token: string, outcome: StoredOutcome, now: number, actor: string): CompletionRequest {
  return { id, token, ...completionValues(outcome, now, actor) };
}
