import type { CompletionStatus } from '../../domain/states.ts';
import type { StoreAdapter, Tx } from '../../store/adapter.ts';
import type { ExecutionRow } from '../../store/schema.ts';
import { appendEvents } from './event.ts';
import { checkLease, lockExecution } from './lease.ts';

export interface Outcome {
  status: CompletionStatus;
  result?: unknown;
  error?: { code: string; message: string } | null;
  usage?: unknown;
}

/**
 * running (or re-queued with the same, still-latest token) → succeeded | failed | cancelled.
 * Accepted iff the row is not terminal and `token` is the latest one granted.
 */
export async function completeWithLease(
  tx: Tx,
  store: StoreAdapter,
  id: string,
  token: string,
  outcome: Outcome,
  now: number,
  actor: string,
): Promise<ExecutionRow> {
  const before = await lockExecution(tx, store, id);
  checkLease(before, token, true);
  const row = await tx
    .updateTable('executions')
    .set({
      status: outcome.status,
      completed_at: now,
      duration_ms: before.started_at === null ? null : now - before.started_at,
      lease_expires_at: null,
      result: outcome.result === undefined ? null : JSON.stringify(outcome.result),
      error_code: outcome.error?.code ?? null,
      error_message: outcome.error?.message ?? null,
      usage: outcome.usage === undefined ? null : JSON.stringify(outcome.usage),
    })
    .where('id', '=', id)
    .where('status', '=', before.status)
    .where('lease_token', '=', token)
    .returningAll()
    .executeTakeFirstOrThrow();
  await appendEvents(tx, [
    { execution_id: id, agent: row.agent, from_status: before.status, to_status: outcome.status, at: now, actor, attempt: row.attempt, reason: outcome.error?.code ?? null },
  ]);
  return row;
}
