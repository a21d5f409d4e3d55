/**
 * Turns among a pool's member agents. Admission is per agent, so without turns a seat freed by
 * agent A goes to whichever member's claim takes the pool's lock first, and an agent whose own
 * workers complete and claim at once (A, flooding) takes it again before B's parked claim is
 * there. So the pool keeps, per member refused only for lack of one of its seats, since when it
 * has waited (`pool_waits`, written by admission under the pool's row lock): a free seat may be
 * taken by a member only when no other member with a live wait has waited longer. Plain data and
 * pure rules here; src/engine/pools.ts reads and writes the waits.
 *
 * Glossary:
 * - wait: a member's row in `pool_waits`: `since` its first refusal for a seat in this wait,
 *   `seen_at` the last claim of it that looked and was refused for a seat.
 * - live: seen within POOL_TURN_TTL_MS. A member whose claimers went away, or that stopped being
 *   refused by the pool's seats alone (held, throttled, its own seats full, its queue empty),
 *   stops holding anyone back once its wait lapses; an admission that sees the member stopped by
 *   something else ends its wait at once.
 * - turn: the free seats go to the live waits in (since, agent) order, one seat each; a member
 *   that takes a seat ends its wait, and waits again at the back when refused next (round robin).
 */

/**
 * How long a wait holds seats for its member without a claim of it looking again. The price of
 * a longer one: a member whose claimers all went away holds a freed seat idle that long; of a
 * shorter one: a parked claim must look more often to keep its place (POOL_TURN_REFRESH_MS).
 */
export const POOL_TURN_TTL_MS = 3_000;
/** A claim parked on a pool's seats looks again at least this often, so its wait stays live. */
export const POOL_TURN_REFRESH_MS = 1_000;

export interface PoolWait {
  agent: string;
  since: number;
  seen_at: number;
}

export const waitLive = (w: Pick<PoolWait, 'seen_at'>, now: number): boolean => now - w.seen_at < POOL_TURN_TTL_MS;

const before = (x: PoolWait, y: PoolWait) => x.since - y.since || (x.agent < y.agent ? -1 : x.agent > y.agent ? 1 : 0);

/** What a pool's turns allow `agent` at `now` with `free` seats free. */
export interface PoolTurn {
  /** Seats it may take: the free ones less one per live wait ahead of it. */
  room: number;
  /** The live waits of other members ahead of it, in turn order. */
  ahead: PoolWait[];
  /** Its own live wait, if any. */
  mine: PoolWait | null;
  /** Every live wait. */
  live: PoolWait[];
}

export function poolTurn(free: number, waits: readonly PoolWait[], agent: string, now: number): PoolTurn {
  const live = waits.filter((w) => waitLive(w, now));
  const mine = live.find((w) => w.agent === agent) ?? null;
  const ahead = live.filter((w) => w.agent !== agent && (mine === null || before(w, mine) < 0)).sort(before);
  return { room: Math.max(0, free - ahead.length), ahead, mine, live };
}

/**
 * The agent's wait in the pool after one admission (`turn`: what the pool's turns allowed it):
 * kept (its place, seen now) or begun (at the back) when the pool's seats alone refused it (`seatRefused`: no seat for it, every throttle open), else ended (it took
 * a seat: its turn is over; or it could not use one: it holds no one back). null: no wait.
 */
export function nextWait(turn: PoolTurn, agent: string, seatRefused: boolean, now: number): PoolWait | null {
  if (!seatRefused) return null;
  if (turn.mine) return { agent, since: turn.mine.since, seen_at: now };
  // A new wait goes behind every live one, also one begun in the same millisecond.
  const last = Math.max(-Infinity, ...turn.live.map((w) => w.since));
  return { agent, since: Math.max(now, last + 1), seen_at: now };
}
