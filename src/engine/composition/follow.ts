import type { Tx } from '../../store/adapter.ts';
import type { ExecutionRow } from '../../store/schema.ts';
import { startChained } from './chains.ts';
import type { FollowContext } from './context.ts';
import { memberFinal } from './groups.ts';

export type { FollowContext };

/** What following some final outcomes did: rows created (announce them after the commit) and rows it ended. */
export interface Followed {
  created: ExecutionRow[];
  ended: ExecutionRow[];
}

/**
 * Rows that just reached their final state in `tx`: terminal, and for a failure, with no retry
 * following it (the retry's outcome is the final one). Every transition that ends executions calls
 * this inside its own transaction, so the work an outcome causes (a chained task, a group's
 * progress and its join) commits with the outcome or not at all.
 *
 * Following an outcome may end more rows (a group policy cancels queued members): those are
 * followed too, in the same transaction, until nothing new ends.
 */
export async function followFinals(tx: Tx, ctx: FollowContext, rows: readonly ExecutionRow[]): Promise<Followed> {
  const out: Followed = { created: [], ended: [] };
  const todo = [...rows];
  for (let row = todo.shift(); row; row = todo.shift()) {
    if (row.status === 'skipped') continue; // a start that started nothing causes nothing
    out.created.push(...(await startChained(tx, ctx, row)));
    const group = await memberFinal(tx, ctx, row);
    out.created.push(...group.created);
    out.ended.push(...group.ended);
    todo.push(...group.ended);
  }
  return out;
}
