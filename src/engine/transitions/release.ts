import type { StoreAdapter, Tx } from '../../store/adapter.ts';
import type { ExecutionRow } from '../../store/schema.ts';
import { checkLease, lockExecution } from './lease.ts';
import { stamp } from './stamp.ts';

/**
 * running → queued, handed back by its worker (graceful shutdown). The delivery is not charged:
 * the attempt the claim added is given back. A row whose cancellation was requested is
 * cancelled instead of queued again.
 */
export async function releaseLease(
  tx: Tx,
  store: StoreAdapter,
  id: string,
  token: string,
  now: number,
  actor: string,
): Promise<ExecutionRow> {
  const before = await lockExecution(tx, store, id);
  checkLease(before, token, false);
  const cancel = before.cancel_requested_at !== null;
  return tx
    .updateTable('executions')
    .set((eb) =>
      cancel
        ? {
            status: 'cancelled',
            completed_at: now,
            duration_ms: now - (before.started_at ?? now),
            lease_expires_at: null,
            ...stamp(now, actor, 'cancel_requested'),
          }
        : { status: 'queued', attempt: eb('attempt', '-', 1), lease_expires_at: null, deadline_at: null, ...stamp(now, actor, 'released') },
    )
    .where('id', '=', id)
    .where('status', '=', 'running')
    .where('lease_token', '=', token)
    .returningAll()
    .executeTakeFirstOrThrow();
}
