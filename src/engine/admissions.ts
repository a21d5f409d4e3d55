import { parsePools } from '../domain/pools.ts';
import type { StoreAdapter, Tx } from '../store/adapter.ts';
import type { ExecutionRow } from '../store/schema.ts';
import { AdmissionCarry, AdmissionWrites } from './admission-carry.ts';
import { setRecent } from './bounded.ts';
import { Gathered } from './gather.ts';
import type { FlowReport } from './pools.ts';
import type { LockedAgent } from '../store/fast-paths.ts';
import { admit, type AdmitOptions } from './transitions/admit.ts';

/** One agent's admission, to be made with others (`id`: the agent's name). */
export interface Admission {
  id: string;
  opts: AdmitOptions;
}

/**
 * A claim stamped with the time its call leaves, not the time it was asked for: a claim that
 * waited for its turn in a gathered call (or for a lane's transaction, admissions.ts) may admit
 * rows submitted meanwhile, whose queued_at must not come after their started_at. Never earlier
 * than asked (a clock measured again may step back).
 */
export function atSend<T extends { now: number }>(request: T, now: () => number): T {
  return { ...request, now: Math.max(request.now, now()) };
}

/** Admissions out at once per engine, each a transaction of its own. */
export const ADMISSION_LANES = 8;

/**
 * Admissions that the gathered claim call could not decide (keys, pools, throttles, a hold that
 * may apply), several agents' in one transaction: one BEGIN and one COMMIT for all of them, and
 * their pools locked once for all. Each agent's admission is the transaction path's own
 * (transitions/admit.ts), made in turn inside it, so each reads its pools' seats, waits and
 * throttles after the admissions made before it in the same transaction, as it would after their
 * commits. A failure makes each alone.
 *
 * Agents that draw from the same pools would wait on each other's pool locks in any case, so they
 * go to the same lane, one transaction out at a time (Gathered); agents of other pools go to other
 * lanes, whose transactions run beside it. An agent's pools are as its last admission here
 * reported them (FlowReport); until then, or without pools, its lane follows its name. A lane
 * is only where the agent's claim waits: every transaction takes its locks in the order below,
 * whatever the lanes.
 */
export class Admissions {
  private readonly lanes: Array<Gathered<Admission, ExecutionRow[]>>;
  private readonly poolsOf = new Map<string, string>();
  /** Agents whose claims the store's claim call left to a transaction, as their last admission here read them. */
  private readonly undecided = new Set<string>();
  private readonly membership = new PoolMembership();

  constructor(store: StoreAdapter, now: () => number) {
    this.lanes = Array.from({ length: ADMISSION_LANES }, () => gatheredAdmissions(store, now, this.membership));
  }

  run(a: Admission): Promise<ExecutionRow[]> {
    const lane = this.lanes[laneOf(this.poolsOf.get(a.id) ?? a.id)]!;
    const report = a.opts.onFlow;
    const onFlow: FlowReport = (f) => {
      if (f.pools) this.note(a.id, f.pools);
      report?.(f);
    };
    const onFastClaim = (decides: boolean) => {
      if (decides) this.undecided.delete(a.id);
      else if (this.undecided.size < 10_000) this.undecided.add(a.id);
      a.opts.onFastClaim?.(decides);
    };
    return lane.run({ id: a.id, opts: { ...a.opts, onFlow, onFastClaim } });
  }

  /**
   * Whether `agent`'s claims go straight to a transaction: its last admission here read that the
   * claim call cannot decide them (its keys, pools, throttles or a hold), so asking it first costs
   * a round trip that answers "undecided". A hint only: the transaction decides exactly either way,
   * and it reads the fact again, so an agent the call can decide again is asked again.
   */
  transactional(agent: string): boolean {
    return this.undecided.has(agent);
  }

  private note(agent: string, pools: readonly string[]): void {
    // Bounded: agents deleted or renamed leave entries behind.
    if (this.poolsOf.size >= 10_000 && !this.poolsOf.has(agent)) this.poolsOf.clear();
    if (pools.length > 0) this.poolsOf.set(agent, pools.join('\u0000'));
    else this.poolsOf.delete(agent);
  }
}

const laneOf = (s: string): number => {
  let h = 0;
  for (let i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) | 0;
  return Math.abs(h) % ADMISSION_LANES;
};

/**
 * One lane's admissions: up to GATHER_MAX agents to a transaction, each stamped with the time its
 * transaction runs (atSend: it may take rows submitted while it waited for the lane). Where the
 * store has fast paths, an admission alone is a gathered transaction of one (its reads and writes
 * one call each, fewer round trips than the transaction path's statements), made again on that
 * path where its agent's pools were not as known or its agent was not found (which it says).
 */
function gatheredAdmissions(store: StoreAdapter, now: () => number, known: PoolMembership): Gathered<Admission, ExecutionRow[]> {
  const fresh = (a: Admission): Admission => ({ id: a.id, opts: atSend(a.opts, now) });
  const alone = (a: Admission) => store.transaction((tx) => admit(tx, store, a.id, fresh(a).opts));
  const one = !store.fastPaths
    ? alone
    : async (a: Admission) => {
        try {
          const out = (await store.transaction((tx) => admitMany(tx, store, [fresh(a)], known))).get(a.id);
          if (out) return out;
        } catch (err) {
          if (!(err instanceof StaleMembership)) throw err;
        }
        return alone(a);
      };
  return new Gathered<Admission, ExecutionRow[]>({
    many: (items) => store.transaction((tx) => admitMany(tx, store, items.map(fresh), known)),
    one,
    // An agent not found by the batch's lock is made alone, which says so.
    absent: alone,
  });
}

/** An agent's pools were not as PoolMembership knew them: the transaction admitted nothing, and is to be made again. */
export class StaleMembership extends Error {
  constructor(agent: string) {
    super(`agent '${agent}' draws from other pools than this process knew`);
  }
}

/**
 * Each agent's pools (its raw column) as the last admission in this process locked them: the
 * lock order of a gathered transaction is computed from them, and the call that locks the agents
 * checks them (FastPaths.lockAgentsAs), so the separate read of every agent's pools is made only
 * for agents not known yet. Bounded (the agents noted longest ago go first): agents deleted or
 * renamed leave entries behind.
 */
export class PoolMembership {
  private readonly pools = new Map<string, string | null>();

  note(agent: string, pools: string | null): void {
    setRecent(this.pools, agent, pools, 10_000);
  }

  /** The agents' pools, if every one is known. */
  of(agents: readonly string[]): Map<string, string | null> | undefined {
    const out = new Map<string, string | null>();
    for (const a of agents) {
      const p = this.pools.get(a);
      if (p === undefined) return undefined;
      out.set(a, p);
    }
    return out;
  }
}

/**
 * The locks first, as every admission takes them: the agent rows in name order, then their pools
 * in name order. Where the agents, taken in the order of their pools, lock each pool they meet
 * after every pool locked before (an agent drawing from one pool always does), admitting them in
 * that order keeps that lock order without locking the pools up front; otherwise the union of
 * their pools is locked here, in name order, before any admission.
 */
export async function admitMany(
  tx: Tx,
  store: StoreAdapter,
  items: readonly Admission[],
  known?: PoolMembership,
): Promise<Map<string, ExecutionRow[]>> {
  const byName = new Map(items.map((i) => [i.id, i]));
  const read = (name: string) => {
    const o = byName.get(name)!.opts;
    return { agent: name, limit: Math.max(0, 2 * o.max), now: o.now };
  };
  const fast = store.fastPaths;
  // Every agent's pools known and their order locking each pool after those before: the agents'
  // locks, reads and pools' locks in one call, which checks the pools the order came from.
  const cached = fast && known ? known.of(items.map((i) => i.id)) : undefined;
  const planned = cached && poolOrder([...cached].map(([name, p]) => ({ name, pools: parsePools(p) })));
  let order: string[];
  let reads: Map<string, LockedAgent> | undefined;
  if (fast && cached && planned?.inOrder) {
    reads = await fast.lockAgentsAs(
      tx,
      planned.order.map((name) => ({ ...read(name), pools: cached.get(name)! })),
    );
    let stale: string | undefined;
    for (const [name, r] of reads) {
      if (r.row.pools !== cached.get(name)) stale = name;
      known!.note(name, r.row.pools);
    }
    if (stale !== undefined) throw new StaleMembership(stale);
    order = planned.order.filter((name) => reads!.has(name));
  } else {
    const names = items.map((i) => i.id).sort();
    const found = await store
      .lockRows(tx.selectFrom('agents').select(['name', 'pools']).where('name', 'in', names).orderBy('name'), 'admission')
      .execute();
    for (const a of found) known?.note(a.name, a.pools);
    const agents = found.map((a) => ({ name: a.name, pools: parsePools(a.pools) }));
    const sorted = poolOrder(agents);
    order = sorted.order;
    if (!sorted.inOrder) {
      const union = [...new Set(agents.flatMap((a) => a.pools))].sort();
      await store.lockRows(tx.selectFrom('pools').select('name').where('name', 'in', union).orderBy('name'), 'admission').execute();
    }
    // Where the store has fast paths, every agent's reads and its pools' locks in that order in one
    // round trip, each admission then reading the pools as those before it left them (AdmissionCarry).
    reads = fast ? await fast.lockAgents(tx, order.map(read)) : undefined;
  }
  const carry = new AdmissionCarry();
  const writes = store.fastPaths ? new AdmissionWrites() : undefined;
  const out = new Map<string, ExecutionRow[]>();
  for (const name of order)
    out.set(name, await admit(tx, store, name, byName.get(name)!.opts, reads && { locked: reads.get(name), carry, writes }));
  if (writes) for (const [name, rows] of await writes.flush(tx, store.fastPaths!)) out.set(name, rows);
  return out;
}

const before = (a: readonly string[], b: readonly string[]): number => {
  for (let i = 0; i < Math.min(a.length, b.length); i++) if (a[i] !== b[i]) return a[i]! < b[i]! ? -1 : 1;
  return a.length - b.length;
};

/**
 * The agents ordered by their pools (each agent's in name order, as parsePools gives them), and
 * whether admitting them in that order locks every pool not yet locked after all those locked
 * before it: then no two such transactions can wait on each other's pools in a cycle.
 */
export function poolOrder(agents: ReadonlyArray<{ name: string; pools: readonly string[] }>): { order: string[]; inOrder: boolean } {
  const sorted = [...agents].sort((x, y) => before(x.pools, y.pools) || (x.name < y.name ? -1 : x.name > y.name ? 1 : 0));
  const held = new Set<string>();
  let last: string | null = null;
  let inOrder = true;
  for (const a of sorted)
    for (const p of a.pools) {
      if (held.has(p)) continue;
      if (last !== null && p < last) inOrder = false;
      held.add(p);
      last = p;
    }
  return { order: sorted.map((a) => a.name), inOrder };
}
