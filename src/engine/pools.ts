import { sql, type RawBuilder } from 'kysely';
import { AHEAD_COUNT_CAP, SEAT_HOLDERS_SHOWN, type WaitingView } from '../domain/admission.ts';
import { BatonError } from '../domain/errors.ts';
import {
  afterStarts,
  parsePools,
  poolsColumn,
  startsAllowed,
  type FlowLimit,
  type FlowPoolView,
  type FlowThrottleView,
} from '../domain/pools.ts';
import { poolTurn, POOL_TURN_REFRESH_MS, type PoolTurn, type PoolWait } from '../domain/pool-turns.ts';
import { nextStartAt, parseThrottle, type Throttle } from '../domain/throttle.ts';
import type { StoreAdapter, Tx } from '../store/adapter.ts';
import { lockedPools as poolsFromRows, type LockedPools } from '../store/fast-paths.ts';
import type { AgentRow } from '../store/schema.ts';
import { perStore, preparedQuery } from '../store/prepared-query.ts';
import type { AdmissionCarry } from './admission-carry.ts';
import { writePoolWait } from './pool-turns.ts';
import { statusIs } from './status-sql.ts';
import type { Executor } from './transitions/stamp.ts';

/** The agent columns flow admission reads (from the row admission locked). */
export const FLOW_COLUMNS = ['pools', 'throttle', 'throttle_tat'] as const;
export type FlowColumns = Pick<AgentRow, 'name' | (typeof FLOW_COLUMNS)[number]>;

/**
 * What an admission tells its caller about the flow limits: the pools the agent draws from (a
 * seat freed in one may let it admit; absent: admission stopped before it read them); when only
 * closed throttles (of the agent, its pools or its keys) stopped it, when they reopen (reopensAt:
 * look again then at the latest); and the members a free seat is held for (`turns`: their
 * claimers should look now).
 */
export type FlowReport = (f: { pools?: string[]; reopensAt: number | null; turns?: string[] }) => void;

/** What the flow limits (the agent's throttle, its pools) allow one admission. */
export interface FlowGate {
  /** The pools the agent draws from. */
  pools: string[];
  /** Most rows they allow now. */
  room: number;
  /** The first limit that allows nothing now, or null. */
  limit: FlowLimit | null;
  /**
   * When something allows nothing now: the latest a parked claim should look again. Throttles
   * alone: when they have all reopened. A pool's seats: at most POOL_TURN_REFRESH_MS on (a seat
   * freed wakes it sooner; looking keeps its wait for a turn live). null: none is closed.
   */
  reopensAt: number | null;
  /** Members with a live wait that a free seat is held for (their turn), when the turns stopped this one. */
  turns: string[];
  /**
   * Record `n` admissions: advance every throttle by `n` starts, and keep or end the agent's wait
   * for a turn in each pool with seats (call once, after admitting, also when `n` is 0).
   */
  commit(n: number): Promise<void>;
}

interface LockedPool {
  name: string;
  max_parallel: number | null;
  throttle: string | null;
  throttle_tat: number | null;
}

/** The pools named `n0`, `n1`, … (`count` of them), in name order: built once per count and lock. */
const poolsQuery = (tx: Executor, p: Record<string, string>, count: number) =>
  tx
    .selectFrom('pools')
    .select(['name', 'max_parallel', 'throttle', 'throttle_tat'])
    .where(
      'name',
      'in',
      Array.from({ length: count }, (_, i) => p[`n${i}`]!),
    )
    .orderBy('name');
const lockedPools = perStore((store) =>
  preparedQuery((tx: Executor, p: Record<string, string>, count: number) => {
    const q = poolsQuery(tx, p, count);
    return store.lockRows(q as never as typeof q, 'admission');
  }),
);
const unlockedPools = preparedQuery(poolsQuery);

/**
 * A pool's seats in use: the running tasks of the agents that draw from it now, the sum of their
 * running_count (a seek of agent_pools_pool and an agent row per member). The one text of that sum
 * for every read in TypeScript; PostgreSQL's admission reads the same sum inside baton_lock_pools,
 * after the pool's lock in the same call (the differential test holds them equal).
 */
const seatsInUse = (pool: RawBuilder<string> | string) =>
  sql<number>`(SELECT coalesce(sum(a.running_count), 0) FROM agent_pools ap JOIN agents a ON a.name = ap.agent WHERE ap.pool = ${pool})`;

/**
 * SQLite: the pools named `n0`, `n1`, … with each seated pool's seats in use and its waits, in one
 * statement, as FastPaths.lockPools answers on PostgreSQL (a row per pool, in name order, its
 * seats in use as `since`; then a row per wait of a seated pool). One statement suffices there: the
 * admission transaction is the one writer (BEGIN IMMEDIATE) and locks no rows, so reading the
 * pools, their seats and their waits apart saw the same state.
 */
const sqlitePoolsQuery = preparedQuery((tx: Executor, p: Record<string, string>, count: number) => {
  const names = Array.from({ length: count }, (_, i) => p[`n${i}`]!);
  return tx
    .selectFrom('pools as x')
    .select([
      sql<number>`0`.as('part'),
      'x.name as pool',
      'x.max_parallel',
      'x.throttle',
      'x.throttle_tat',
      sql<string | null>`null`.as('agent'),
      sql<number | null>`CASE WHEN x.max_parallel IS NOT NULL THEN ${seatsInUse(sql.ref('x.name'))} END`.as('since'),
      sql<number | null>`null`.as('seen_at'),
    ])
    .where('x.name', 'in', names)
    .unionAll(
      tx
        .selectFrom('pool_waits as w')
        .innerJoin('pools as x', 'x.name', 'w.pool')
        .select([
          sql<number>`1`.as('part'),
          'w.pool',
          sql<number | null>`null`.as('max_parallel'),
          sql<string | null>`null`.as('throttle'),
          sql<number | null>`null`.as('throttle_tat'),
          'w.agent',
          'w.since',
          'w.seen_at',
        ])
        .where('w.pool', 'in', names)
        .where('x.max_parallel', 'is not', null),
    )
    .orderBy('part')
    .orderBy('pool')
    .orderBy('agent');
});

async function sqlitePools(tx: Executor, names: readonly string[]): Promise<LockedPools> {
  const rows = await sqlitePoolsQuery(tx, Object.fromEntries(names.map((n, i) => [`n${i}`, n])), names.length);
  return poolsFromRows(rows);
}

/** The pools' rows, locked in name order (after the agent's: nothing locks a pool and then an agent). */
async function lockPools(tx: Executor, store: StoreAdapter | null, names: readonly string[]): Promise<LockedPool[]> {
  if (names.length === 0) return [];
  const p = Object.fromEntries(names.map((n, i) => [`n${i}`, n]));
  return store ? lockedPools(store)(tx, p, names.length) : unlockedPools(tx, p, names.length);
}

/**
 * A pool's seats in use (seatsInUse). Read after the pool's lock: every admission into the pool
 * holds that lock when it raises a count (the trigger raises it in the admitting statement) and
 * until it commits, so the sum read here includes every admission that went before; a count
 * lowered meanwhile (a task that ended) can only make it smaller.
 */
export async function poolSeatsInUse(db: Executor, pool: string): Promise<number> {
  const r = await db.selectNoFrom(seatsInUse(pool).as('n')).executeTakeFirstOrThrow();
  return Number(r.n);
}

/**
 * A pool's seats in use (as poolSeatsInUse) and its waits for a turn (src/domain/pool-turns.ts: at
 * most one row per member) in one statement: one round trip less while admission holds the pool's
 * lock. Read after that lock, so every count raised and every wait written by an admission that
 * went before is seen. The seats come as the row without an agent.
 */
const seatsAndWaitsQuery = preparedQuery((db: Executor, p: { pool: string }) =>
  db
    .selectFrom('pool_waits')
    .select(['agent', 'since', 'seen_at'])
    .where('pool', '=', p.pool)
    .unionAll(db.selectNoFrom([sql<string>`null`.as('agent'), seatsInUse(p.pool).as('since'), sql<number>`0`.as('seen_at')])),
);

async function seatsAndWaits(db: Executor, pool: string): Promise<{ inUse: number; waits: PoolWait[] }> {
  let inUse = 0;
  const waits: PoolWait[] = [];
  for (const r of await seatsAndWaitsQuery(db, { pool })) {
    if (r.agent === null) inUse = Number(r.since);
    else waits.push({ agent: r.agent, since: Number(r.since), seen_at: Number(r.seen_at) });
  }
  return { inUse, waits };
}

/**
 * The flow limits of one admission of `agent` wanting up to `want` rows: its throttle, then each
 * pool it draws from (locked here, in name order), its seats and its throttle. null: the agent has
 * neither a throttle nor pools (nothing is read or locked). Call it holding the agent's lock.
 * `store` null: a report (`waiting`, the canary) that reads the pools without locking them.
 */
export async function flowGate(
  tx: Executor,
  store: StoreAdapter | null,
  agent: FlowColumns,
  now: number,
  want: number,
  /** The agent's pools as FastPaths.lockAgent locked them with the agent's row, if it did. */
  locked?: LockedPools,
  /** In a gathered transaction: the pools as its admissions before this one left them. */
  carry?: AdmissionCarry,
): Promise<FlowGate | null> {
  const own = parseThrottle(agent.throttle);
  const names = parsePools(agent.pools);
  if (!own && names.length === 0) return null;
  let room = want;
  let limit: FlowLimit | null = null;
  let seatsClosed = false;
  let throttleClosed = false;
  let reopensAt = -Infinity;
  const turns: string[] = [];
  const seatPools: Array<{ name: string; turn: PoolTurn; stored: boolean }> = [];
  const throttled: Array<{ t: Throttle; tat: number | null; write: (tat: number | null) => Promise<unknown>; pool?: string }> = [];
  const close = (l: FlowLimit) => {
    limit ??= l;
    if (l.kind === 'pool_full' || l.kind === 'pool_turn') seatsClosed = true;
    else {
      throttleClosed = true;
      reopensAt = Math.max(reopensAt, l.next_admit_at);
    }
  };
  const throttle = (t: Throttle, tat: number | null, write: (tat: number | null) => Promise<unknown>, pool?: string): number => {
    throttled.push({ t, tat, write, ...(pool !== undefined ? { pool } : {}) });
    return startsAllowed(t, tat === null ? null : Number(tat), now, want).starts;
  };
  if (own) {
    const starts = throttle(own, agent.throttle_tat, (tat) =>
      tx.updateTable('agents').set({ throttle_tat: tat }).where('name', '=', agent.name).execute(),
    );
    if (starts === 0) close({ kind: 'throttled', next_admit_at: nextStartAt(own, Number(agent.throttle_tat), now) });
    room = Math.min(room, starts);
  }
  // Where the store has fast paths, the locks, the seats and the waits are one call (one round
  // trip less while the pools are locked), and on SQLite one statement; else a statement for the
  // locks and one for each pool's seats.
  const read =
    !store || names.length === 0
      ? null
      : store.fastPaths
        ? (locked ?? (await store.fastPaths.lockPools(tx, names)))
        : store.kind === 'sqlite'
          ? await sqlitePools(tx, names)
          : null;
  const fast = read && carry ? carry.through(read) : read;
  for (const p of fast ? fast.pools : await lockPools(tx, store, names)) {
    if (p.max_parallel !== null) {
      const { inUse, waits } = fast?.seats.get(p.name) ?? (await seatsAndWaits(tx, p.name));
      const free = Math.max(0, p.max_parallel - inUse);
      // The free seats go to the members that have waited longer first (src/domain/pool-turns.ts).
      const turn = poolTurn(free, waits, agent.name, now);
      const seats = { pool: p.name, max_parallel: p.max_parallel, in_use: inUse };
      if (free === 0) close({ kind: 'pool_full', ...seats });
      else if (turn.room === 0) {
        const first = turn.ahead[0]!;
        close({ kind: 'pool_turn', ...seats, turn_of: first.agent, since: first.since, waiting: turn.ahead.length });
        for (const w of turn.ahead.slice(0, free)) turns.push(w.agent);
      }
      seatPools.push({ name: p.name, turn, stored: waits.some((w) => w.agent === agent.name) });
      room = Math.min(room, turn.room);
    }
    const pt = parseThrottle(p.throttle);
    if (pt) {
      const starts = throttle(
        pt,
        p.throttle_tat,
        (tat) => tx.updateTable('pools').set({ throttle_tat: tat }).where('name', '=', p.name).execute(),
        p.name,
      );
      if (starts === 0) close({ kind: 'pool_throttled', pool: p.name, next_admit_at: nextStartAt(pt, Number(p.throttle_tat), now) });
      room = Math.min(room, starts);
    }
  }
  if (seatsClosed) reopensAt = Math.max(reopensAt, now + POOL_TURN_REFRESH_MS);
  return {
    pools: names,
    room,
    limit,
    reopensAt: limit !== null ? reopensAt : null,
    turns,
    async commit(n: number) {
      if (n > 0)
        for (const x of throttled) {
          const tat = afterStarts(x.t, x.tat === null ? null : Number(x.tat), now, n);
          await x.write(tat);
          if (x.pool !== undefined) carry?.throttled(x.pool, tat);
        }
      // A wait is kept only where the pool's seats alone refused it: a member that could not use a
      // seat (a throttle closed) must not hold one back from the others.
      for (const s of seatPools) {
        const refused = s.turn.room === 0 && !throttleClosed && n === 0;
        const wait = await writePoolWait(tx, s.name, agent.name, s.turn, s.stored, refused, now);
        carry?.seated(s.name, agent.name, n, wait);
      }
    },
  };
}

/** A FlowReport that fills a waiting claim's hint (src/engine/waiters.ts). */
export function flowHint(hint: { reopensAt?: number; pools?: string[] }): FlowReport {
  return (f) => {
    if (f.pools) hint.pools = f.pools;
    if (f.reopensAt !== null) hint.reopensAt = f.reopensAt;
  };
}

/** The agent settings that say what it draws from and how fast it starts (AgentInput's). */
export interface AgentFlowInput {
  /** Pools it draws from (each must exist); [] or null: none. */
  pools?: readonly string[] | null;
  /** Starts per period (src/domain/throttle.ts); null: none. */
  throttle?: Throttle | null;
}

/** The agent columns for those settings (undefined: unchanged). Removing a throttle forgets its state. */
export function agentFlowColumns(input: AgentFlowInput): Partial<Pick<AgentRow, 'pools' | 'throttle' | 'throttle_tat'>> {
  return {
    ...(input.pools !== undefined ? { pools: poolsColumn(input.pools ?? []) } : {}),
    ...(input.throttle !== undefined ? { throttle: input.throttle && JSON.stringify(input.throttle) } : {}),
    ...(input.throttle === null ? { throttle_tat: null } : {}),
  };
}

/**
 * Write which pools `agent` draws from (its agent_pools rows), in the transaction that writes the
 * agent row (so it holds the agent's lock). An unknown pool is refused naming the field. The
 * pools are read holding each against deletion (`existence`, in name order) before anything
 * refers to them, so a deletion racing this (Pools.delete locks the pool first) either finished
 * before (the pool is not found: the same 400 as a name never made) or waits and then sees the
 * agent among its members (409 pool_in_use): never a broken foreign key.
 */
export async function writeAgentPools(
  tx: Tx,
  store: StoreAdapter,
  agent: string,
  pools: readonly string[] | null | undefined,
): Promise<void> {
  if (pools === undefined) return;
  const names = parsePools(poolsColumn(pools ?? []));
  if (names.length > 0) {
    const found = await store
      .lockRows(tx.selectFrom('pools').select('name').where('name', 'in', names).orderBy('name'), 'existence')
      .execute();
    const missing = names.filter((n) => !found.some((f) => f.name === n));
    if (missing.length > 0)
      throw new BatonError('validation_error', `body.pools: no pool named ${missing.map((m) => `'${m}'`).join(', ')}`, {
        field: 'pools',
        missing,
      });
  }
  await tx.deleteFrom('agent_pools').where('agent', '=', agent).execute();
  if (names.length > 0)
    await tx
      .insertInto('agent_pools')
      .values(names.map((pool) => ({ agent, pool })))
      .execute();
}

const isoOf = (ms: number) => new Date(ms).toISOString();
const throttleView = (t: Throttle, nextAt: number): FlowThrottleView => ({ ...t, next_admit_at: isoOf(nextAt) });

/** A pool's part of a waiting answer: its seats, their holders (longest-running first), its throttle. */
export async function poolView(db: Executor, name: string, now: number): Promise<FlowPoolView | null> {
  const p = await db
    .selectFrom('pools')
    .select(['name', 'max_parallel', 'throttle', 'throttle_tat'])
    .where('name', '=', name)
    .executeTakeFirst();
  if (!p) return null;
  const running = await db
    .selectFrom('executions')
    .innerJoin('agent_pools', 'agent_pools.agent', 'executions.agent')
    .select(['executions.id', 'executions.agent', 'executions.started_at'])
    .where('agent_pools.pool', '=', name)
    .where('executions.status', '=', statusIs('running'))
    .limit(AHEAD_COUNT_CAP)
    .execute();
  const holders = running
    .sort((x, y) => Number(x.started_at ?? 0) - Number(y.started_at ?? 0) || (x.id < y.id ? -1 : 1))
    .slice(0, SEAT_HOLDERS_SHOWN)
    .map((h) => ({
      execution_id: h.id,
      agent: h.agent,
      started_at: h.started_at === null ? null : isoOf(Number(h.started_at)),
      running_seconds: h.started_at === null ? null : Math.max(0, Math.round((now - Number(h.started_at)) / 1000)),
    }));
  const t = parseThrottle(p.throttle);
  const tat = p.throttle_tat === null ? null : Number(p.throttle_tat);
  return {
    name,
    max_parallel: p.max_parallel,
    in_use: await poolSeatsInUse(db, name),
    holders,
    throttle: t && throttleView(t, nextStartAt(t, tat, now)),
    turn: null,
  };
}

/**
 * Whether the agent's throttle or a pool stops it now, for `waiting` (read without locks, as
 * admission would decide it): the reason and the limit's facts, or null.
 */
export async function flowWaiting(
  db: Executor,
  agent: FlowColumns,
  now: number,
): Promise<Pick<WaitingView, 'reason' | 'throttle' | 'pool'> | null> {
  const gate = await flowGate(db, null, agent, now, 1);
  const limit = gate?.limit;
  if (!limit) return null;
  if (limit.kind === 'throttled') {
    const t = parseThrottle(agent.throttle)!;
    return { reason: 'throttled', throttle: throttleView(t, limit.next_admit_at), pool: null };
  }
  const pool = await poolView(db, limit.pool, now);
  if (limit.kind === 'pool_turn' && pool) pool.turn = { agent: limit.turn_of, waiting_since: isoOf(limit.since), waiting: limit.waiting };
  return { reason: limit.kind, throttle: null, pool };
}
