import type { Tx } from '../../store/adapter.ts';
import type { ExecutionRow } from '../../store/schema.ts';

/**
 * A debounced task takes a later submit's message and payload, and its due time moves to the end
 * of the new window (src/engine/flow-submit.ts). Its status stays queued: the guard re-checks
 * queued and not yet due, as admission takes a row only once it is due, so a row admitted
 * meanwhile is not changed (undefined: the caller queues a new task).
 */
export async function foldDebounced(
  tx: Tx,
  id: string,
  p: { message: string; payload: string; window: number; now: number },
): Promise<ExecutionRow | undefined> {
  return tx
    .updateTable('executions')
    .set({ message: p.message, payload: p.payload, run_after: p.now + p.window * 1000, debounce_seconds: p.window })
    .where('id', '=', id)
    .where('status', '=', 'queued')
    .where('run_after', '>', p.now)
    .returningAll()
    .executeTakeFirst();
}
