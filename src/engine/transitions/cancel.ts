import { sql } from 'kysely';
import type { CancelReason } from '../../domain/error-codes.ts';
import { InvalidTransition } from '../../domain/errors.ts';
import type { StoreAdapter, Tx } from '../../store/adapter.ts';
import type { ExecutionRow } from '../../store/schema.ts';
import { statusUnindexed } from '../status-sql.ts';
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

/** Rows one statement of cancelQueued cancels at most (its ids are bound parameters). */
const CANCEL_SLICE = 500;

/**
 * queued → cancelled for rows the caller has locked (one execution, or all of a deleted agent's),
 * answered in their order: one guarded UPDATE a slice of CANCEL_SLICE rows, not one a row (a
 * deleted agent's backlog of 100,000 was 100,000 statements). Each row is found through its
 * primary key whatever the statistics (statusUnindexed: `id IN (…) AND status = 'queued'` could
 * otherwise be read through executions_admission, whose predicate is that status and whose last
 * column is id: every queued row of every agent).
 */
export async function cancelQueued(
  tx: Tx,
  rows: readonly ExecutionRow[],
  now: number,
  actor: string,
  reason: CancelReason,
): Promise<ExecutionRow[]> {
  const done = new Map<string, ExecutionRow>();
  for (let i = 0; i < rows.length; i += CANCEL_SLICE) {
    const ids = rows.slice(i, i + CANCEL_SLICE).map((r) => r.id);
    const cancelled = await tx
      .updateTable('executions')
      .set({
        status: 'cancelled',
        completed_at: now,
        duration_ms: sql<number | null>`cast(${now} as bigint) - started_at`,
        error_code: reason,
        ...stamp(now, actor, reason),
      })
      .where('id', 'in', ids)
      .where(statusUnindexed('status'), '=', 'queued')
      .returningAll()
      .execute();
    for (const row of cancelled) done.set(row.id, row);
  }
  return rows.flatMap((r) => done.get(r.id) ?? []);
}
