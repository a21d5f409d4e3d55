import { sql } from 'kysely';
import { LeaseLost } from '../../domain/errors.ts';
import type { StoreAdapter, Tx } from '../../store/adapter.ts';
import { checkLease, lockExecution } from './lease.ts';

export interface Renewed {
  lease_expires_at: number;
  cancel_requested: boolean;
  deadline_at: number | null;
}

/** Heartbeat: extend a running row's lease by its TTL. Changes no status. */
export async function renewLease(tx: Tx, store: StoreAdapter, id: string, token: string, now: number): Promise<Renewed> {
  const row = await tx
    .updateTable('executions')
    .set({ lease_expires_at: sql<number>`cast(${now} as bigint) + lease_ttl_seconds * 1000`, heartbeat_at: now })
    .where('id', '=', id)
    .where('status', '=', 'running')
    .where('lease_token', '=', token)
    .returning(['lease_expires_at', 'cancel_requested_at', 'deadline_at'])
    .executeTakeFirst();
  if (row) {
    return { lease_expires_at: Number(row.lease_expires_at), cancel_requested: row.cancel_requested_at !== null, deadline_at: row.deadline_at };
  }
  // Refused: read the row only to say precisely why (or 404).
  const current = await lockExecution(tx, store, id);
  checkLease(current, token, false);
  throw new LeaseLost(id, { status: current.status, reason: 'the lease changed while renewing' });
}
