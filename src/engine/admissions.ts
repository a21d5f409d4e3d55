import { parsePools } from '../domain/pools.ts';
import type { StoreAdapter, Tx } from '../store/adapter.ts';
import type { ExecutionRow } from '../store/schema.ts';
import { AdmissionCarry, AdmissionWrites } from './admission-carry.ts';
import { Gathered } from './gather.ts';
import type { FlowReport } from './pools.ts';
import { somePools, type LockedAgent } from '../store/fast-paths.ts';
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
  // Object.assign, not `{ ...request, now }`: V8's slow path on Node 20 (create.ts queuedValues).
  return Object.assign({}, request, { now: Math.max(request.now, now()) });
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

  constructor(store: StoreAdapter, now: () => number) {
    this.lanes = Array.from({ length: ADMISSION_LANES }, () => gatheredAdmissions(store, now));
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
    return lane.run({ id: a.id, opts: Object.assign({}, a.opts, { onFlow, onFastClaim }) });
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
 * one call each, fewer round trips than the transaction path's statements).
 */
function gatheredAdmissions(store: StoreAdapter, now: () => number): Gathered<Admission, ExecutionRow[]> {
  const fresh = (a: Admission): Admission => ({ id: a.id, opts: atSend(a.opts, now) });
  const alone = (a: Admission) => store.transaction((tx) => admit(tx, store, a.id, fresh(a).opts));
  const many = (items: readonly Admission[]) => store.transaction((tx) => admitMany(tx, store, items.map(fresh)));
  return new Gathered<Admission, ExecutionRow[]>({
    many,
    one: !store.fastPaths ? alone : async (a) => (await many([a])).get(a.id) ?? alone(a),
    // An agent not found by the batch's lock is made alone, which says so.
    absent: alone,
  });
}

/**
 * The locks first, as every admission takes them: the agent rows in name order, then their pools
 * in name order. Where the store has fast paths, that is one call (FastPaths.lockAdmissions), which
 * also makes every agent's reads and reads each pool once, after every agent's lock: the
 * admissions then read the pools as those before them in the transaction left them
 * (AdmissionCarry). Else the agent rows in one statement and, unless the agents taken in the order
 * of their pools lock each new pool after every pool before it (an agent of one pool always does),
 * the union of their pools in name order, before any admission.
 */
export async function admitMany(tx: Tx, store: StoreAdapter, items: readonly Admission[]): Promise<Map<string, ExecutionRow[]>> {
  const byName = new Map(items.map((i) => [i.id, i]));
  const names = items.map((i) => i.id).sort();
  const fast = store.fastPaths;
  let order: string[];
  let reads: Map<string, LockedAgent> | undefined;
  if (fast) {
    const locked = await fast.lockAdmissions(
      tx,
      names.map((name) => {
        const o = byName.get(name)!.opts;
        return { agent: name, limit: Math.max(0, 2 * o.max), now: o.now };
      }),
    );
    reads = new Map();
    for (const [name, r] of locked.agents) {
      // Each agent that found candidates reads its own pools out of the transaction's one read.
      const own = locked.pools && r.candidates?.length ? somePools(locked.pools, parsePools(r.row.pools)) : undefined;
      reads.set(name, own ? { ...r, pools: own } : r);
    }
    order = poolOrder([...reads.values()].map((r) => ({ name: r.row.name, pools: parsePools(r.row.pools) }))).order;
  } else {
    const found = await store
      .lockRows(tx.selectFrom('agents').select(['name', 'pools']).where('name', 'in', names).orderBy('name'), 'admission')
      .execute();
    const agents = found.map((a) => ({ name: a.name, pools: parsePools(a.pools) }));
    const sorted = poolOrder(agents);
    order = sorted.order;
    if (!sorted.inOrder) {
      const union = [...new Set(agents.flatMap((a) => a.pools))].sort();
      await store.lockRows(tx.selectFrom('pools').select('name').where('name', 'in', union).orderBy('name'), 'admission').execute();
    }
  }
  const carry = new AdmissionCarry();
  const writes = fast ? new AdmissionWrites() : undefined;
  const out = new Map<string, ExecutionRow[]>();
  for (const name of order)
    out.set(name, await admit(tx, store, name, byName.get(name)!.opts, reads && { locked: reads.get(name), carry, writes }));
  if (writes) for (const [name, rows] of await writes.flush(tx, fast!)) out.set(name, rows);
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
