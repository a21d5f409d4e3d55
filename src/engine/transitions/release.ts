import type { StoreAdapter, Tx } from '../../store/adapter.ts';
import { preparedQuery } from '../../store/prepared-query.ts';
import type { ExecutionRow } from '../../store/schema.ts';
import { checkLease, lockExecution } from './lease.ts';
import { QUEUED, RUNNING, stamp, type Executor } from './stamp.ts';

/** releaseAlone's statement, built once (preparedQuery). */
const releaseRow = preparedQuery((db: Executor, p: { id: string; token: string; now: number; actor: string }) =>
  db
    .updateTable('executions')
    .set((eb) => ({
      status: QUEUED,
      attempt: eb('attempt', '-', 1),
      lease_expires_at: null,
      deadline_at: null,
      ...stamp(p.now, p.actor, 'released'),
    }))
    .where('id', '=', p.id)
    .where('status', '=', RUNNING)
    .where('lease_token', '=', p.token)
    .where('cancel_requested_at', 'is', null)
    .returningAll(),
);

/**
 * releaseLease's common case in one guarded statement, run alone where the store has fast paths
 * (store.fastPaths.alone: one round trip): a running row, this token, no cancellation asked for, goes back to the
 * queue; its event and the seat counter's decrement come from the database's trigger in the same
 * statement. Undefined when the guards did not hold: nothing was written, and releaseLease in a
 * transaction decides (a cancellation asked for ends the row, with what that causes) or explains.
 */
export async function releaseAlone(db: Executor, id: string, token: string, now: number, actor: string): Promise<ExecutionRow | undefined> {
  const [row] = await releaseRow(db, { id, token, now, actor });
  return row;
}

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
