import { sql } from 'kysely';
import type { Outcome } from '../../domain/outcomes.ts';
import type { ExecutionRow } from '../../store/schema.ts';
import { explainRefusal } from './lease.ts';
import { stamp, type Executor } from './stamp.ts';

export type { Outcome };

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
  const row = await db
    .updateTable('executions')
    .set({
      status: outcome.status,
      completed_at: now,
      duration_ms: sql<number>`cast(${now} as bigint) - started_at`,
      lease_expires_at: null,
      result: outcome.result === undefined ? null : JSON.stringify(outcome.result),
      error_code: outcome.error?.code ?? null,
      error_message: outcome.error?.message ?? null,
      usage: outcome.usage === undefined ? null : JSON.stringify(outcome.usage),
      ...stamp(now, actor, outcome.error?.code ?? outcome.status),
    })
    .where('id', '=', id)
    .where('lease_token', '=', token)
    .where('status', 'in', ['running', 'queued'])
    .returningAll()
    .executeTakeFirst();
  return row ?? explainRefusal(db, id, token, true);
}
