import type { ExecutionRow, NewExecution } from '../../store/schema.ts';
import { stamp, type Executor } from './stamp.ts';

export type NewQueued = Omit<NewExecution, 'status' | 'attempt' | 'queued_at' | 'created_at' | 'changed_at' | 'changed_by' | 'change_reason'>;

/**
 * create → queued, but only while the agent's backlog has room: the count and the insert are
 * one statement. Call it holding the agent lock (see Engine.submit) so the count is exact.
 * Returns undefined when the backlog is full.
 */
export async function insertQueued(db: Executor, row: NewQueued, maxBacklog: number, now: number, actor: string): Promise<ExecutionRow | undefined> {
  const values = { ...row, status: 'queued' as const, attempt: 0, created_at: now, queued_at: now, ...stamp(now, actor, 'created') };
  const columns = Object.keys(values) as Array<keyof typeof values>;
  return db
    .insertInto('executions')
    .columns(columns)
    .expression(
      db
        .selectNoFrom((eb) => columns.map((c) => eb.val(values[c] as any).as(c)))
        .where(
          (eb) =>
            eb
              .selectFrom('executions')
              .select((e) => e.fn.countAll<number>().as('n'))
              .where('agent', '=', row.agent)
              .where('status', '=', 'queued'),
          '<',
          maxBacklog,
        ),
    )
    .returningAll()
    .executeTakeFirst();
}
