import type { Kysely } from 'kysely';
import type { DB } from '../store/schema.ts';
import { queuedExpr } from './backlog.ts';

export interface LiveCounts {
  running: number;
  queued: number;
}

/**
 * Running and queued executions per agent (all agents, or the ones named), from the counters the
 * database keeps in step with the rows: `running_count` (the seats) and the
 * backlog (`agent_backlog.queued_in - agents.queued_out`, engine/backlog.ts). One row per agent:
 * the cost follows the agents, never their history or the depth of their backlogs (counting the
 * rows read every queued one, for each agents list and scrape). The canary checks the counters against the rows (S-04, S-05). Agents with neither are
 * absent from the map.
 */
export async function liveCountsByAgent(db: Kysely<DB>, agents?: readonly string[]): Promise<Map<string, LiveCounts>> {
  const out = new Map<string, LiveCounts>();
  if (agents && agents.length === 0) return out;
  let q = db
    .selectFrom('agents as a')
    .innerJoin('agent_backlog as b', 'b.agent', 'a.name')
    .select(['a.name', 'a.running_count', queuedExpr().as('queued')]);
  if (agents) q = q.where('a.name', 'in', agents);
  for (const r of await q.execute()) {
    const c = { running: Number(r.running_count), queued: Number(r.queued) };
    if (c.running !== 0 || c.queued !== 0) out.set(r.name, c);
  }
  return out;
}
