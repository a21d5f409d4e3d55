import type { Tx } from '../../store/adapter.ts';
import type { ExecutionRow, NewExecution } from '../../store/schema.ts';
import { appendEvents } from './event.ts';

export type NewQueued = Omit<NewExecution, 'status' | 'attempt' | 'queued_at' | 'created_at'>;

/** create → queued. The caller has already checked the backlog under the agent lock. */
export async function insertQueued(tx: Tx, row: NewQueued, now: number, actor: string): Promise<ExecutionRow> {
  const inserted = await tx
    .insertInto('executions')
    .values({ ...row, status: 'queued', attempt: 0, created_at: now, queued_at: now })
    .returningAll()
    .executeTakeFirstOrThrow();
  await appendEvents(tx, [
    { execution_id: inserted.id, agent: inserted.agent, from_status: null, to_status: 'queued', at: now, actor, attempt: 0 },
  ]);
  return inserted;
}
