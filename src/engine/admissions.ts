import { parsePools } from '../domain/pools.ts';
import type { StoreAdapter, Tx } from '../store/adapter.ts';
import type { ExecutionRow } from '../store/schema.ts';
import { Gathered } from './gather.ts';
import { admit, type AdmitOptions } from './transitions/admit.ts';

/** One agent's admission, to be made with others (`id`: the agent's name). */
export interface Admission {
  id: string;
  opts: AdmitOptions;
}

/**
 * Admissions that the gathered claim call could not decide (keys, pools, throttles, a hold that
 * may apply), several agents' in one transaction: one BEGIN and one COMMIT for all of them, and
 * their pools locked once for all. Each agent's admission is the transaction path's own
 * (transitions/admit.ts), made in turn inside it, so each reads its pools' seats, waits and
 * throttles after the admissions made before it in the same transaction, as it would after their
 * commits. One transaction is out at a time per engine (Gathered); a failure makes each alone.
 */
export function gatheredAdmissions(store: StoreAdapter): Gathered<Admission, ExecutionRow[]> {
  const one = (a: Admission) => store.transaction((tx) => admit(tx, store, a.id, a.opts));
  return new Gathered<Admission, ExecutionRow[]>({
    many: (items) => store.transaction((tx) => admitMany(tx, store, items)),
    one,
    // An agent not found by the batch's lock is made alone, which says so.
    absent: one,
  });
}

/**
 * The locks first, as every admission takes them: the agent rows in name order, then their pools
 * in name order. Where the agents, taken in the order of their pools, lock each pool they meet
 * after every pool locked before (an agent drawing from one pool always does), admitting them in
 * that order keeps that lock order without locking the pools up front; otherwise the union of
 * their pools is locked here, in name order, before any admission.
 */
async function admitMany(tx: Tx, store: StoreAdapter, items: readonly Admission[]): Promise<Map<string, ExecutionRow[]>> {
  const names = items.map((i) => i.id).sort();
  const found = await store
    .lockRows(tx.selectFrom('agents').select(['name', 'pools']).where('name', 'in', names).orderBy('name'), 'admission')
    .execute();
  const byName = new Map(items.map((i) => [i.id, i]));
  const agents = found.map((a) => ({ name: a.name, pools: parsePools(a.pools) }));
  const { order, inOrder } = poolOrder(agents);
  if (!inOrder) {
    const union = [...new Set(agents.flatMap((a) => a.pools))].sort();
    await store.lockRows(tx.selectFrom('pools').select('name').where('name', 'in', union).orderBy('name'), 'admission').execute();
  }
  const out = new Map<string, ExecutionRow[]>();
  for (const name of order) out.set(name, await admit(tx, store, name, byName.get(name)!.opts));
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
