import { LeaseLost, NotFound } from '../../domain/errors.ts';
import { isTerminal } from '../../domain/states.ts';
import type { StoreAdapter, Tx } from '../../store/adapter.ts';
import type { ExecutionRow } from '../../store/schema.ts';
import type { Executor } from './stamp.ts';

/** Read an execution and hold its row lock until the transaction ends. */
export async function lockExecution(tx: Tx, store: StoreAdapter, id: string): Promise<ExecutionRow> {
  const row = await store.lockRows(tx.selectFrom('executions').selectAll().where('id', '=', id), 'wait').executeTakeFirst();
  if (!row) throw new NotFound('execution', id);
  return row;
}

/**
 * Fencing. `token` must be the latest token granted for this row. With `landable`, a row that
 * went back to the queue with that token still accepts it (a slow worker lands its result,
 * unless someone claimed the row since, which replaced the token).
 */
export function checkLease(row: ExecutionRow, token: string, landable: boolean): void {
  if (row.lease_token !== token) {
    throw new LeaseLost(row.id, { status: row.status, reason: 'a newer lease was granted, or this token was never valid' });
  }
  if (isTerminal(row.status)) {
    throw new LeaseLost(row.id, {
      status: row.status,
      error_code: row.error_code,
      reason: `execution already ended as ${row.status}${row.error_code ? ` (${row.error_code})` : ''}`,
    });
  }
  if (row.status !== 'running' && !landable) {
    throw new LeaseLost(row.id, { status: row.status, reason: 'the lease lapsed and the execution went back to the queue' });
  }
}

/** After a guarded single-statement write matched nothing: say precisely why (or 404). */
export async function explainRefusal(db: Executor, id: string, token: string, landable: boolean): Promise<never> {
  const row = await db.selectFrom('executions').selectAll().where('id', '=', id).executeTakeFirst();
  if (!row) throw new NotFound('execution', id);
  checkLease(row, token, landable);
  throw new LeaseLost(id, { status: row.status, reason: 'the lease changed while this request was applied' });
}
