import type { Tx } from '../store/adapter.ts';
import type { EventRow } from './types.ts';

/** Events per query: one primary-key range read; a chunk is judged in a few milliseconds before the event loop gets a turn. */
export const EVENTS_PER_CHUNK = 2_000;
/**
 * Events one cycle reads at most; the next cycle continues from its checkpoint. It bounds a
 * cycle after long downtime (or the first cycle on a database that predates checkpoints) to
 * about a second on a loaded small machine with a long history, on either store; twice as many
 * events a cycle passed that on PostgreSQL. The timer runs further cycles at once
 * while one stops behind (Canary.tick), so the canary keeps up with more events per interval.
 */
export const EVENTS_PER_CYCLE = 10_000;
/**
 * A cycle also stops reading events after the chunk during which it had spent this long reading
 * and judging them (wall time). EVENTS_PER_CYCLE bounds the work, this bounds the snapshot's
 * length on a slow or busy machine, where the cap alone let a catch-up cycle over a long history
 * run past a second. The next cycle goes on from the checkpoint at once.
 */
export const EVENTS_READ_BUDGET_MS = 300;
/** Executions per keyset chunk of a full check. */
export const FULL_ROWS_PER_CHUNK = 2_000;
/**
 * A gap in event ids is passed by a checkpoint once the event after it is this much older than
 * the canary's clock. On PostgreSQL an event id is drawn (BIGSERIAL) before its transaction
 * commits, so a transaction still open can commit an event below ids the canary has already
 * read; a gap that old is a transaction that rolled back (or rows the pruner removed). Baton's
 * transactions last milliseconds to seconds; the margin also absorbs clock skew between the
 * server that stamped `at` and the canary. Too short would skip a slow transaction's events;
 * too long only re-reads the events above a rolled-back id for a little longer.
 */
export const GAP_SETTLE_MS = 60_000;

/** Up to `limit` events after `afterId`, in id order (a primary-key range read). */
export async function readEvents(tx: Tx, afterId: number, limit: number): Promise<EventRow[]> {
  const rows = await tx
    .selectFrom('execution_events')
    .select(['id', 'execution_id', 'agent', 'from_status', 'to_status', 'at', 'seats_in_use', 'seat_cap', 'flow_key'])
    .where('id', '>', afterId)
    .orderBy('id')
    .limit(limit)
    .execute();
  return rows.map((r) => ({
    ...r,
    id: Number(r.id),
    at: Number(r.at),
    seats_in_use: r.seats_in_use === null ? null : Number(r.seats_in_use),
    seat_cap: r.seat_cap === null ? null : Number(r.seat_cap),
  }));
}

/**
 * How far a checkpoint may advance: over a contiguous run of event ids, and over a gap only once
 * the event after it is older than GAP_SETTLE_MS (then the gap is permanent). Fed events in id
 * order; once it stops at a young gap it stays there for the rest of the cycle — the events
 * beyond are still judged, and judged again next cycle.
 *
 * SQLite never has an open gap (one writer at a time, and AUTOINCREMENT rolls back with its
 * transaction); a gap there is rows the pruner removed, which are old, so the rule passes it.
 */
export class Frontier {
  blocked = false;
  constructor(
    /** Every event up to this id has been judged (or is permanently gone). */
    public at: number,
    private readonly now: number,
  ) {}

  feed(e: Pick<EventRow, 'id' | 'at'>): void {
    if (this.blocked || e.id <= this.at) return;
    if (e.id === this.at + 1 || e.at < this.now - GAP_SETTLE_MS) this.at = e.id;
    else this.blocked = true;
  }
}
