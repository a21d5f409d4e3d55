import { sql } from 'kysely';
import { explainRefusal } from './lease.ts';
import type { Executor } from './stamp.ts';
import { preparedQuery } from '../../store/prepared-query.ts';

export interface Renewed {
  lease_expires_at: number;
  cancel_requested: boolean;
  deadline_at: number | null;
}

/** renewLease's statement, built once (preparedQuery). */
const renewRow = preparedQuery((db: Executor, p: { id: string; token: string; now: number }) =>
  db
    .updateTable('executions')
    .set({ lease_expires_at: sql<number>`cast(${p.now} as bigint) + lease_ttl_seconds * 1000`, heartbeat_at: p.now })
    .where('id', '=', p.id)
    .where('status', '=', 'running')
    .where('lease_token', '=', p.token)
    .returning(['lease_expires_at', 'cancel_requested_at', 'deadline_at', 'agent'])
    // Read in the same statement: one round trip per heartbeat.
    .returning((eb) =>
      eb
        .exists(
          eb
            .selectFrom('agents')
            .select('agents.name')
            .whereRef('agents.name', '=', 'executions.agent')
            .where('agents.delivery', '=', 'pull')
            .where('agents.lapse_hold_at', 'is not', null),
        )
        .as('lapse_held'),
    ),
);

/** Heartbeat: extend a running row's lease by its TTL. One guarded statement; changes no status. */
export async function renewLease(
  db: Executor,
  id: string,
  token: string,
  now: number,
): Promise<
  Renewed & {
    agent: string;
    /** The agent is pull-delivered and under a shared-cause lapse hold, which a heartbeat ends (engine.ts). */
    lapse_held: boolean;
  }
> {
  const [row] = await renewRow(db, { id, token, now });
  if (!row) return explainRefusal(db, id, token, false);
  return {
    lease_expires_at: Number(row.lease_expires_at),
    cancel_requested: row.cancel_requested_at !== null,
    deadline_at: row.deadline_at,
    agent: row.agent,
    // EXISTS comes back as 1/0 on SQLite and a boolean on PostgreSQL.
    lapse_held: Boolean(row.lapse_held),
  };
}
