import type { CancelReason } from '../../domain/error-codes.ts';
import { InvalidTransition } from '../../domain/errors.ts';
import type { StoreAdapter, Tx } from '../../store/adapter.ts';
import type { ExecutionRow } from '../../store/schema.ts';
import { lockExecution } from './lease.ts';
import { stamp } from './stamp.ts';

/**
 * Cancel one execution. queued → cancelled at once; running → cancellation requested (the
 * worker learns it on its next heartbeat; the reaper forces it after the grace period).
 * Cancelling a row already cancelled is a no-op that returns it; any other terminal row refuses.
 */
export async function cancelExecution(
  tx: Tx,
  store: StoreAdapter,
  id: string,
  now: number,
  actor: string,
  reason: CancelReason,
): Promise<ExecutionRow> {
  const before = await lockExecution(tx, store, id);
  if (before.status === 'cancelled') return before;
  if (before.status === 'queued') {
    const [row] = await cancelQueued(tx, [before], now, actor, reason);
    return row!;
  }
  if (before.status === 'running') {
    if (before.cancel_requested_at !== null) return before;
    return tx
      .updateTable('executions')
      .set({ cancel_requested_at: now, ...stamp(now, actor, 'cancel_requested') })
      .where('id', '=', id)
      .where('status', '=', 'running')
      .where('cancel_requested_at', 'is', null)
      .returningAll()
      .executeTakeFirstOrThrow();
  }
  throw new InvalidTransition(id, before.status, 'cancel');
}

/** queued → cancelled for rows the caller has locked (one execution, or all of a deleted agent's). */
export async function cancelQueued(
  tx: Tx,
  rows: ExecutionRow[],
  now: number,
  actor: string,
  reason: CancelReason,
): Promise<ExecutionRow[]> {
  const out: ExecutionRow[] = [];
  for (const before of rows) {
    const row = await tx
      .updateTable('executions')
      .set({
        status: 'cancelled',
        completed_at: now,
        duration_ms: before.started_at === null ? null : now - before.started_at,
        error_code: reason,
        ...stamp(now, actor, reason),
      })
      .where('id', '=', before.id)
      .where('status', '=', 'queued')
      .returningAll()
      .executeTakeFirst();
    if (row) out.push(row);
  }
  return out;
}
