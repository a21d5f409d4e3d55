import type { ExecutionStatus } from '../../domain/states.ts';
import type { Tx } from '../../store/adapter.ts';

export interface EventInput {
  execution_id: string;
  agent: string;
  from_status: ExecutionStatus | null;
  to_status: ExecutionStatus;
  at: number;
  actor: string;
  reason?: string | null;
  attempt: number;
  seats_in_use?: number | null;
  seat_cap?: number | null;
}

/** Append execution events; called by every transition in the same transaction as its write. */
export async function appendEvents(tx: Tx, events: EventInput[]): Promise<void> {
  if (events.length === 0) return;
  await tx
    .insertInto('execution_events')
    .values(
      events.map((e) => ({
        execution_id: e.execution_id,
        agent: e.agent,
        from_status: e.from_status,
        to_status: e.to_status,
        at: e.at,
        actor: e.actor,
        reason: e.reason ?? null,
        attempt: e.attempt,
        seats_in_use: e.seats_in_use ?? null,
        seat_cap: e.seat_cap ?? null,
      })),
    )
    .execute();
}
