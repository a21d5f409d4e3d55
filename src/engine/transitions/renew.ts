import { sql } from 'kysely';
import { explainRefusal } from './lease.ts';
import type { Executor } from './stamp.ts';

export interface Renewed {
  lease_expires_at: number;
  cancel_requested: boolean;
  deadline_at: number | null;
}

/** Heartbeat: extend a running row's lease by its TTL. One guarded statement; changes no status. */
export async function renewLease(
  db: Executor,
  id: string,
  token: string,
  now: number,
): Promise<Renewed & { /** a heartbeat ends its agent's shared-cause lapse hold (engine.ts) */ agent: string }> {
  const row = await db
    .updateTable('executions')
    .set({ lease_expires_at: sql<number>`cast(${now} as bigint) + lease_ttl_seconds * 1000`, heartbeat_at: now })
    .where('id', '=', id)
    .where('status', '=', 'running')
    .where('lease_token', '=', token)
    .returning(['lease_expires_at', 'cancel_requested_at', 'deadline_at', 'agent'])
    .executeTakeFirst();
  if (!row) return explainRefusal(db, id, token, false);
  return {
    lease_expires_at: Number(row.lease_expires_at),
    cancel_requested: row.cancel_requested_at !== null,
    deadline_at: row.deadline_at,
    agent: row.agent,
  };
}
