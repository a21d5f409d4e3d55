import type { Kysely } from 'kysely';
import type { DB } from '../store/schema.ts';
import { statusIs } from './status-sql.ts';

export interface LiveCounts {
  running: number;
  queued: number;
}

/**
 * Running and queued executions per agent (all agents, or the ones named). One grouped count per
 * status, each over that status's partial index (executions_running, executions_admission), so
 * the cost follows the live rows, never the history: an agent with a million finished runs
 * costs what one with none does. Agents with neither are absent from the map.
 */
export async function liveCountsByAgent(db: Kysely<DB>, agents?: readonly string[]): Promise<Map<string, LiveCounts>> {
  const out = new Map<string, LiveCounts>();
  if (agents && agents.length === 0) return out;
  for (const status of ['running', 'queued'] as const) {
    let q = db
      .selectFrom('executions')
      .select(['agent', (eb) => eb.fn.countAll<number>().as('n')])
      .where('status', '=', statusIs(status));
    if (agents) q = q.where('agent', 'in', agents);
    for (const r of await q.groupBy('agent').execute()) {
      const c = out.get(r.agent) ?? { running: 0, queued: 0 };
      c[status] = Number(r.n);
      out.set(r.agent, c);
    }
  }
  return out;
}
