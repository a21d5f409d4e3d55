import type { Tx } from '../../store/adapter.ts';
import type { ExecutionRow } from '../../store/schema.ts';
import type { FollowContext } from './context.ts';

/** The tasks `row`'s final outcome starts through subscriptions on its agent (issue #14: chains). */
export async function startChained(_tx: Tx, _ctx: FollowContext, _row: ExecutionRow): Promise<ExecutionRow[]> {
  return []; // TODO(helper A)
}
