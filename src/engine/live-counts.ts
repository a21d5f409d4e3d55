import type { Kysely } from 'kysely';
import type { DB } from '../store/schema.ts';
import { statusIs } from './status-sql.ts';

export interface LiveCounts {
  running: number;
  queued: number;
}

/**
 * Running and queued executions per agent (all agents, or the ones named). One grouped count per
 * status, each a seek per agent (executions_running and executions_admission, or, on a SQLite
 * store never analysed, executions_agent_status_recent by agent and status; both cover it), so
 * the cost follows the agents and their live rows, never the history: an agent with a million
 * finished runs costs what one with none does. Agents with neither are absent from the map.
 *
 * "All agents" is said as `agent IN (SELECT name FROM agents)`, not as no filter: without
 * statistics (Baton never runs ANALYZE) SQLite counted through executions_status_recent instead,
 * reading each live row's agent from the table and sorting them. Deleting an agent ends its live
 * executions in the same transaction, so no live row belongs to an agent not listed.
 */
export async function liveCountsByAgent(db: Kysely<DB>, agents?: readonly string[]): Promise<Map<string, LiveCounts>> {
  const out = new Map<string, LiveCounts>();
  if (agents && agents.length === 0) return out;
  for (const status of ['running', 'queued'] as const) {
    let q = db
      .selectFrom('executions')
      .select(['agent', (eb) => eb.fn.countAll<number>().as('n')])
      .where('status', '=', statusIs(status));
    q = agents ? q.where('agent', 'in', agents) : q.where('agent', 'in', (eb) => eb.selectFrom('agents').select('name'));
    for (const r of await q.groupBy('agent').execute()) {
      const c = out.get(r.agent) ?? { running: 0, queued: 0 };
      c[status] = Number(r.n);
      out.set(r.agent, c);
    }
  }
  return out;
}
