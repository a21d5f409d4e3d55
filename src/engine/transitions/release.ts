import type { StoreAdapter, Tx } from '../../store/adapter.ts';
import type { ExecutionRow } from '../../store/schema.ts';
import { appendEvents } from './event.ts';
import { checkLease, lockExecution } from './lease.ts';

/**
 * running → queued, handed back by its worker (graceful shutdown). The delivery is not charged:
 * the attempt the claim added is given back. A row whose cancellation was requested is
 * cancelled instead of queued again.
 */
export async function releaseLease(tx: Tx, store: StoreAdapter, id: string, token: string, now: number, actor: string): Promise<ExecutionRow> {
  const before = await lockExecution(tx, store, id);
  checkLease(before, token, false);
  const cancel = before.cancel_requested_at !== null;
  const row = await tx
    .updateTable('executions')
    .set((eb) =>
      cancel
        ? { status: 'cancelled', completed_at: now, duration_ms: now - (before.started_at ?? now), lease_expires_at: null }
        : { status: 'queued', attempt: eb('attempt', '-', 1), lease_expires_at: null, deadline_at: null },
    )
    .where('id', '=', id)
    .where('status', '=', 'running')
    .where('lease_token', '=', token)
    .returningAll()
    .executeTakeFirstOrThrow();
  await appendEvents(tx, [
    { execution_id: id, agent: row.agent, from_status: 'running', to_status: row.status, at: now, actor, attempt: row.attempt, reason: cancel ? 'cancel_requested' : 'released' },
  ]);
  return row;
}
