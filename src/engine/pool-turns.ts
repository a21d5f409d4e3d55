import { nextWait, POOL_TURN_REFRESH_MS, type PoolTurn, type PoolWait } from '../domain/pool-turns.ts';
import type { Executor } from './transitions/stamp.ts';

/**
 * Keep or end `agent`'s wait in `pool` after one admission (nextWait decides), holding the pool's
 * lock. `stored`: whether it has a row (live or lapsed); `turn`: what the turns allowed it.
 * Returns its wait as stored now: null for none, undefined where its row was left as it was.
 */
export async function writePoolWait(
  tx: Executor,
  pool: string,
  agent: string,
  turn: PoolTurn,
  stored: boolean,
  seatRefused: boolean,
  now: number,
): Promise<PoolWait | null | undefined> {
  const mine = turn.mine;
  const next = nextWait(turn, agent, seatRefused, now);
  if (next === null) {
    if (stored) await tx.deleteFrom('pool_waits').where('pool', '=', pool).where('agent', '=', agent).execute();
    return null;
  }
  // A wait seen lately is not written again: a row version per refused look buys nothing while
  // its liveness (POOL_TURN_TTL_MS) is far longer than the staleness this allows.
  if (mine !== null && stored && now - mine.seen_at < POOL_TURN_REFRESH_MS / 2) return undefined;
  await tx
    .insertInto('pool_waits')
    .values({ pool, agent, since: next.since, seen_at: next.seen_at })
    .onConflict((oc) => oc.columns(['pool', 'agent']).doUpdateSet({ since: next.since, seen_at: next.seen_at }))
    .execute();
  return next;
}

/**
 * End `agent`'s waits in its pools: an admission stopped before the pools (a hold, its own seats
 * full, nothing admissible) could not use a seat, so it holds no one back. Its own rows only,
 * under its agent lock; another member's admission reading them under the pool's lock sees them
 * before or after, either a valid order.
 */
export async function endPoolWaits(tx: Executor, agent: string, pools: readonly string[]): Promise<void> {
  if (pools.length === 0) return;
  await tx
    .deleteFrom('pool_waits')
    .where('pool', 'in', [...pools])
    .where('agent', '=', agent)
    .execute();
}
