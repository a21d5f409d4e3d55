import type { SkipReason } from '../../domain/error-codes.ts';
import type { StoreAdapter, Tx } from '../../store/adapter.ts';
import type { ExecutionRow, NewExecution } from '../../store/schema.ts';
import { QUEUED, stamp, type Executor } from './stamp.ts';

export type NewQueued = Omit<
  NewExecution,
  'status' | 'attempt' | 'queued_at' | 'created_at' | 'changed_at' | 'changed_by' | 'change_reason'
>;

/**
 * create → queued, but only while the agent's backlog has room: the count and the insert are
 * one statement. Call it holding the agent lock (see Engine.submit) so the count is exact.
 * Returns undefined when the backlog is full.
 */
export async function insertQueued(
  db: Executor,
  row: NewQueued,
  maxBacklog: number,
  now: number,
  actor: string,
): Promise<ExecutionRow | undefined> {
  const values = queuedValues(row, now, actor);
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
              .where('status', '=', QUEUED),
          '<',
          maxBacklog,
        ),
    )
    .returningAll()
    .executeTakeFirst();
}

/** A queued row's full values (create → queued), for batch inserts whose backlog the caller checked under the agent lock. */
export function queuedValues(row: NewQueued, now: number, actor: string) {
  // Object.assign rather than `{ ...row, more }`: V8 builds a spread-then-extended object of
  // this size about ten times slower (measured 12 µs against 1 µs a row; the scheduler makes
  // thousands at once).
  return Object.assign({}, row, { status: 'queued' as const, attempt: 0, created_at: now, queued_at: now }, stamp(now, actor, 'created'));
}

/**
 * A skipped row's full values (create → skipped): a tick that started nothing leaves a terminal
 * record of why (`error_code`: already_running | backlog_full | missed). The unique
 * (schedule_id, scheduled_for) index makes it one row per due time, like a real run.
 */
export function skippedValues(row: NewQueued, code: SkipReason, message: string, now: number, actor: string): NewExecution {
  return Object.assign(
    {},
    row,
    {
      status: 'skipped' as const,
      attempt: 0,
      created_at: now,
      queued_at: null,
      completed_at: now,
      error_code: code,
      error_message: message,
    },
    stamp(now, actor, code),
  );
}

/**
 * create → queued | skipped, many rows in few statements (the scheduler's batches). The caller
 * checked each agent's backlog under the agent lock; every row must start queued or skipped.
 */
export async function insertCreated(tx: Tx, store: StoreAdapter, rows: NewExecution[]): Promise<void> {
  for (const r of rows) {
    if (r.status !== 'queued' && r.status !== 'skipped')
      throw new Error(`a new execution starts queued or skipped, not ${r.status} (${r.id})`);
  }
  await store.insertMany(tx, 'executions', rows);
}
