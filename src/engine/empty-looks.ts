import { sql } from 'kysely';
import { claimStampDue } from '../domain/admission.ts';
import type { DeliveryMode } from '../domain/delivery.ts';
import type { StoreAdapter } from '../store/adapter.ts';
import { queuedExpr } from './backlog.ts';

/**
 * Fewest agents a look must cover, none of them woken for work just queued, before their queues
 * are read first: the read is a round trip of its own, and each agent it leaves out saves its
 * admission's row lock and reads in the claim call (baton_claim_many).
 */
export const EMPTY_LOOKS_FROM = 8;

/**
 * Of `agents`, those whose admission now would find nothing and write nothing: agents read with no
 * queued row (`agent_backlog.queued_in` less `agents.queued_out`, the counters the engine keeps:
 * backlog.ts) whose claim would be the fast path's (fact `fast_claim`: no hold and no flow limit can
 * apply, src/domain/fast-paths.ts), of the claim's delivery, and whose claim stamp is not due. What
 * an empty admission of any other would do (stamp, end a hold, leave a pool's turn, refuse a
 * delivery) is left to it. One statement, through the two tables' keys, outside any transaction:
 * its snapshot is no older than the caller's armed waiters, so work committed after it is
 * announced to them and work committed before it is counted.
 */
export type EmptyLooks = (agents: readonly string[], delivery: DeliveryMode) => Promise<Set<string>>;

/**
 * The read on `store`, where a look at an agent costs a row lock in the store's claim call
 * (PostgreSQL); undefined elsewhere (SQLite's admission reads the counters with its agent: admit.ts).
 */
export function emptyLooksOn(store: StoreAdapter, now: () => number): EmptyLooks | undefined {
  if (store.kind !== 'postgres' || !store.fastPaths) return undefined;
  return async (agents, delivery) => {
    const at = now();
    const { rows } = await sql<{ name: string; delivery: string; fast_claim: number; last_claim_at: number | null }>`
      SELECT a.name, a.delivery, a.fast_claim, a.last_claim_at
        FROM agents a JOIN agent_backlog b ON b.agent = a.name
        WHERE a.name = ANY(${agents}::text[]) AND ${queuedExpr()} <= 0`.execute(store.db);
    const out = new Set<string>();
    for (const r of rows) {
      if (r.delivery === delivery && Number(r.fast_claim) === 1 && !claimStampDue(r.last_claim_at, at)) out.add(r.name);
    }
    return out;
  };
}
