import type { Kysely } from 'kysely';
import type { DB } from '../store/schema.ts';
import type { Finding } from './types.ts';

/**
 * H-01's evidence, each read by a primary-key seek (never a count over history):
 * - the newest event id (the log only grows, save for the pruner),
 * - whether any execution exists,
 * - how many executions the pruner has removed in total (retention_state), which is what
 *   explains a newest event id going down.
 */
export interface Evidence {
  maxEventId: number;
  anyExecution: boolean;
  pruned: number;
}

/** The H-01 checkpoint row holds the evidence of the last good snapshot. */
export const H01_CHECKPOINT = 'H-01';

export async function readEvidence(db: Kysely<DB>): Promise<Evidence> {
  // The newest end of each primary key: one index seek on both stores. Ids grow with time and
  // the pruner deletes from the oldest end, where PostgreSQL keeps the deleted rows' index
  // entries until vacuum (and for as long as an open snapshot may see them): a walk from that
  // end passes every pruned row before it finds a live one.
  const ev = await db
    .selectFrom('execution_events')
    .select((eb) => eb.fn.max<number>('id').as('m'))
    .executeTakeFirst();
  const ex = await db
    .selectFrom('executions')
    .select((eb) => eb.fn.max<string>('id').as('m'))
    .executeTakeFirst();
  const rs = await db.selectFrom('retention_state').select('total_executions').where('id', '=', 'retention').executeTakeFirst();
  return { maxEventId: Number(ev?.m ?? 0), anyExecution: ex?.m !== null && ex?.m !== undefined, pruned: Number(rs?.total_executions ?? 0) };
}

/**
 * H-01: the snapshot failed, or contradicts evidence read outside it — before it on the main
 * connection (`before`), and by the last good cycle (`previous`). Events committed before the
 * snapshot began are in it, and the newest event id never goes down unless the pruner ran in
 * between; an event log with events means executions exist (every event references one).
 */
export function judgeH01(
  failure: string | undefined,
  snapshot: Evidence | undefined,
  before: Evidence | undefined,
  previous: { maxEventId: number; pruned: number } | undefined,
): Finding[] {
  if (failure || !snapshot) return [{ subject: 'canary', reason: 'snapshot_failed', detail: { code: failure ?? 'error' } }];
  const regressedFrom = (e: { maxEventId: number; pruned: number } | undefined) =>
    e !== undefined && snapshot.maxEventId < e.maxEventId && snapshot.pruned === e.pruned;
  if (regressedFrom(before) || regressedFrom(previous)) {
    return [
      {
        subject: 'canary',
        reason: 'snapshot_regressed',
        detail: {
          max_event_id: snapshot.maxEventId,
          before_snapshot: before?.maxEventId ?? null,
          previous_cycle: previous?.maxEventId ?? null,
        },
      },
    ];
  }
  if (!snapshot.anyExecution && before && before.maxEventId > 0 && snapshot.pruned === before.pruned) {
    return [{ subject: 'canary', reason: 'empty_snapshot_contradicted', detail: { newest_event_outside: before.maxEventId } }];
  }
  return [];
}
