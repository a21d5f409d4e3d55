import type { Tx } from '../../store/adapter.ts';
import type { ExecutionRow } from '../../store/schema.ts';
import type { FollowContext } from './context.ts';

/** A group member reached its final state: count it on the group, decide the group, create its join (issue #14: groups). */
export async function memberFinal(
  _tx: Tx,
  _ctx: FollowContext,
  _row: ExecutionRow,
): Promise<{ created: ExecutionRow[]; ended: ExecutionRow[] }> {
  return { created: [], ended: [] }; // TODO(helper B)
}
