import { sql } from 'kysely';
import type { Outcome } from '../../domain/outcomes.ts';
import type { ExecutionRow } from '../../store/schema.ts';
import { explainRefusal } from './lease.ts';
import { stamp, type Executor } from './stamp.ts';
import { ENABLED } from '../status-sql.ts';
import { preparedQuery } from '../../store/prepared-query.ts';

export type { Outcome };

/** The values a completion writes, from its outcome. */
function completionValues(outcome: Outcome, now: number, actor: string) {
  return {
    status: outcome.status,
    now,
    actor,
    result: outcome.result === undefined ? null : JSON.stringify(outcome.result),
    error_code: outcome.error?.code ?? null,
    error_message: outcome.error?.message ?? null,
    usage: outcome.usage === undefined ? null : JSON.stringify(outcome.usage),
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
  outcome: Outcome,
  now: number,
  actor: string,
): Promise<ExecutionRow> {
  const [row] = await completeRow(db, { id, token, ...completionValues(outcome, now, actor) });
  return row ?? explainRefusal(db, id, token, true);
}

/** completeWithLease's statement, built once (preparedQuery). */
const completeRow = preparedQuery((db: Executor, p: { id: string; token: string } & CompletionValues) =>
  db
    .updateTable('executions')
    .set(completion(p))
    .where('id', '=', p.id)
    .where('lease_token', '=', p.token)
    .where('status', 'in', ['running', 'queued'])
    .returningAll(),
);

/**
 * The agent of the execution row `table` has nothing a success there would change: no budget, a
 * breaker that a success leaves as it is (off, or closed with a window of successes only), and no
 * enabled subscription — so there is no spending, breaker count or chained task to commit with it.
 */
function successChangesNothing(table: 'executions' | 'e') {
  const agent = sql.ref(`${table}.agent`);
  return sql<boolean>`EXISTS (
      SELECT 1 FROM agents a
      WHERE a.name = ${agent} AND a.budget IS NULL
        AND (a.breaker_config IS NULL OR (a.breaker_state = 'closed' AND a.breaker_consecutive = 0
             AND a.breaker_recent = repeat('0', (a.breaker_config::json ->> 'window')::int))))
    AND NOT EXISTS (SELECT 1 FROM subscriptions s WHERE s.source_agent = ${agent} AND s.enabled = ${ENABLED})`;
}

/** completeAlone's statement, built once (preparedQuery). */
const completeAloneRow = preparedQuery((db: Executor, p: { id: string; token: string } & CompletionValues) =>
  db
    .updateTable('executions')
    .set(completion(p))
    .where('id', '=', p.id)
    .where('lease_token', '=', p.token)
    .where('status', 'in', ['running', 'queued'])
    .where('group_id', 'is', null)
    .where(successChangesNothing('executions'))
    .returningAll(),
);

/**
 * A completion that causes nothing else, as one statement (PostgreSQL): the same compare-and-set
 * as completeWithLease, taken only when the outcome is not a failure (no retry policy applies),
 * the execution is in no group, and its agent has no budget, no enabled subscription and a
 * breaker that a success leaves unchanged (off, or closed with its whole window successes:
 * breakerOnOutcome's patch would equal the row) — so there is no spending, breaker count, retry,
 * chained task or group progress to commit with it.
 * `undefined` when it does not apply or is refused (nothing written): the caller completes in a
 * transaction, which does everything and explains a refusal.
 */
export async function completeAlone(
  db: Executor,
  id: string,
  token: string,
  outcome: Outcome,
  now: number,
  actor: string,
): Promise<ExecutionRow | undefined> {
  if (outcome.status === 'failed') return undefined;
  const [row] = await completeAloneRow(db, { id, token, ...completionValues(outcome, now, actor) });
  return row;
}

/** One completion of completeAloneMany: completeAlone's arguments. */
export interface LoneCompletion {
  id: string;
  token: string;
  outcome: Outcome;
  now: number;
  actor: string;
}

/**
 * completeAlone for many executions in one statement (PostgreSQL), each with its own outcome,
 * time and actor: the same guards, row by row. Returns the rows completed, by id; an execution
 * missing from the map was not completed (the guards did not hold, it was refused, or its outcome
 * is a failure) and nothing was written for it. Ids must be distinct.
 */
export async function completeAloneMany(db: Executor, items: LoneCompletion[]): Promise<Map<string, ExecutionRow>> {
  const values = items
    .filter((i) => i.outcome.status !== 'failed')
    .map((i) => ({ id: i.id, token: i.token, ...completionValues(i.outcome, i.now, i.actor) }));
  if (values.length === 0) return new Map();
  const column = <K extends keyof CompletionValues | 'id' | 'token'>(k: K) => values.map((v) => v[k]);
  const rows = await completeManyRows(db, {
    id: column('id'),
    token: column('token'),
    status: column('status'),
    now: column('now'),
    actor: column('actor'),
    result: column('result'),
    error_code: column('error_code'),
    error_message: column('error_message'),
    usage: column('usage'),
    reason: column('reason'),
  });
  return new Map(rows.map((r) => [r.id, r]));
}

/** completeAloneMany's values, one array per column, an execution at the same index in each. */
type LoneArrays = { [K in 'id' | 'token' | keyof CompletionValues]: Array<(CompletionValues & { id: string; token: string })[K]> };

/**
 * completeAloneMany's statement, built once (preparedQuery). Each row is found by primary key
 * (`id = ANY`), so no plan can read the batch against history. The agent rows whose seat counters
 * the event trigger changes are locked first, in name order, before any execution row: `held` is
 * read by a one-time filter, evaluated before the scan, so two batches at once never wait on each
 * other in a cycle.
 */
const completeManyRows = preparedQuery((db: Executor, p: LoneArrays) =>
  db
    .with(
      'v',
      () => sql<{
        id: string;
        token: string;
        status: string;
        at: number;
        actor: string;
        result: string | null;
        error_code: string | null;
        error_message: string | null;
        usage: string | null;
        reason: string;
      }>`(
        SELECT * FROM unnest(${p.id}::text[], ${p.token}::text[], ${p.status}::text[], ${p.now}::bigint[], ${p.actor}::text[],
          ${p.result}::text[], ${p.error_code}::text[], ${p.error_message}::text[], ${p.usage}::text[], ${p.reason}::text[])
        AS u(id, token, status, at, actor, result, error_code, error_message, usage, reason))`,
    )
    .with('held', (qc) =>
      qc
        .selectFrom('agents')
        .select('name')
        .where('name', 'in', (eb) =>
          eb
            .selectFrom('executions')
            .select('agent')
            .where(sql<boolean>`id = ANY(${p.id}::text[])`),
        )
        .orderBy('name')
        .forNoKeyUpdate(),
    )
    .updateTable('executions as e')
    .from('v')
    .set({
      status: sql`v.status`,
      completed_at: sql`v.at`,
      duration_ms: sql`v.at - e.started_at`,
      lease_expires_at: null,
      result: sql`v.result`,
      error_code: sql`v.error_code`,
      error_message: sql`v.error_message`,
      usage: sql`v.usage`,
      changed_at: sql`v.at`,
      changed_by: sql`v.actor`,
      change_reason: sql`v.reason`,
    })
    .where(sql<boolean>`e.id = ANY(${p.id}::text[])`)
    .where(sql<boolean>`(SELECT count(*) FROM held) >= 0`)
    .whereRef('e.id', '=', 'v.id')
    .whereRef('e.lease_token', '=', 'v.token')
    .where('e.status', 'in', ['running', 'queued'])
    .where('e.group_id', 'is', null)
    .where(successChangesNothing('e'))
    .returningAll('e'),
);
