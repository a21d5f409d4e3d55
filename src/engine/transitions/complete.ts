import { sql } from 'kysely';
import type { StoredOutcome } from '../../domain/outcomes.ts';
import type { ExecutionRow } from '../../store/schema.ts';
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
 * A completion that causes nothing else, in one round trip (PostgreSQL): the same compare-and-set
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
  outcome: StoredOutcome,
  now: number,
  actor: string,
): Promise<ExecutionRow | undefined> {
  return (await completeAloneMany(db, [{ id, token, outcome, now, actor }])).get(id);
}

/** One completion of completeAloneMany: completeAlone's arguments. */
export interface LoneCompletion {
  id: string;
  token: string;
  outcome: StoredOutcome;
  now: number;
  actor: string;
}

/**
 * completeAlone for many executions in one call, one round trip and one commit (PostgreSQL: the
 * function baton_complete_many, migration 0023, which locks the execution rows first, then
 * updates each by primary key with these guards, in agent name order). Each execution has its
 * own outcome, time and actor. Returns the rows completed, by id; an execution missing from the
 * map was not completed (the guards did not hold, it was refused, or its outcome is a failure)
 * and nothing was written for it. Ids must be distinct.
 */
export async function completeAloneMany(db: Executor, items: LoneCompletion[]): Promise<Map<string, ExecutionRow>> {
  const values = items
    .filter((i) => i.outcome.status !== 'failed')
    .map((i) => ({ id: i.id, token: i.token, ...completionValues(i.outcome, i.now, i.actor) }));
  if (values.length === 0) return new Map();
  const column = <K extends keyof (typeof values)[number]>(k: K) => values.map((v) => v[k]);
  const { rows } = await sql<ExecutionRow>`SELECT * FROM baton_complete_many(${column('id')}::text[], ${column('token')}::text[],
    ${column('status')}::text[], ${column('now')}::bigint[], ${column('actor')}::text[], ${column('result')}::text[],
    ${column('error_code')}::text[], ${column('error_message')}::text[], ${column('usage')}::text[], ${column('reason')}::text[])`.execute(
    db,
  );
  return new Map(rows.map((r) => [r.id, r]));
}
