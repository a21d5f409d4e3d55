import type { ExecutionRow } from '../../store/schema.ts';
import { stamp, type Executor } from './stamp.ts';

/**
 * queued → failed (`trigger_failed`): a trigger created the row but could not answer its caller
 * (a later step failed). The row must not stay queued and run behind the caller's back: it is
 * failed with the reason, by compare-and-set on `queued`. Returns undefined when the row had
 * already moved on (a worker took it; the caller then gets an error but the run is real).
 */
export async function failUnanswered(db: Executor, id: string, reason: string, now: number, actor: string): Promise<ExecutionRow | undefined> {
  return db
    .updateTable('executions')
    .set({ status: 'failed', completed_at: now, error_code: 'trigger_failed', error_message: reason, ...stamp(now, actor, 'trigger_failed') })
    .where('id', '=', id)
    .where('status', '=', 'queued')
    .returningAll()
    .executeTakeFirst();
}
