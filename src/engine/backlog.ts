import { sql, type Expression, type ExpressionBuilder, type Kysely, type SqlBool } from 'kysely';
import type { DB } from '../store/schema.ts';
import { statusIs } from './status-sql.ts';

/**
 * Queued executions per agent, from the counters the database keeps:
 * `agent_backlog.queued_in` (rows created queued, written only by creators under
 * their new-work turn) less `agents.queued_out` (rows that left `queued`, less those that came
 * back, kept by the event trigger beside the seats). One row per agent, however deep the backlog:
 * counting the rows made a submit's cost grow with the backlog. Read
 * under the new-work turn (lockAgentsForNewWork) it is exact for creating work: no other creator
 * runs, and claims only shorten the backlog. The canary checks it against the rows (S-05).
 */
export async function backlogs(db: Kysely<DB>, names: readonly string[]): Promise<Map<string, number>> {
  if (names.length === 0) return new Map();
  const rows = await db
    .selectFrom('agents as a')
    .innerJoin('agent_backlog as b', 'b.agent', 'a.name')
    .select(['a.name', queuedExpr().as('n')])
    .where('a.name', 'in', names)
    .execute();
  return new Map(rows.map((r) => [r.name, Number(r.n)]));
}

/** One agent's backlog as a scalar subquery (null for an unknown agent), for a statement that checks and writes at once. */
export function backlogOf(eb: ExpressionBuilder<DB, any>, agent: string) {
  return eb
    .selectFrom('agent_backlog as b')
    .innerJoin('agents as a', 'a.name', 'b.agent')
    .select(queuedExpr().as('n'))
    .where('b.agent', '=', agent);
}

/**
 * SQLite: the agent's queued rows as a column of a read of `agents` (`queued`; admission's agent
 * read, admit.ts), so a look at an agent with nothing queued walks no queue. Only SQLite, as
 * keyRunningColumn (flow-keys.ts) says why: on PostgreSQL the statement's snapshot would be older
 * than the agent's row lock.
 */
export const queuedColumn = sql<number>`(SELECT b.queued_in FROM agent_backlog b WHERE b.agent = agents.name) - agents.queued_out`.as(
  'queued',
);

/** The backlog of `agents as a` joined to `agent_backlog as b`. */
export const queuedExpr = () => sql<number>`b.queued_in - a.queued_out`;

/**
 * Queued rows waiting since before `cutoff`: since they were queued, or since their last start if a
 * lapsed lease put them back, or since their run_after (a delayed task is not stale before it was
 * allowed to start). The reaper's backlog-expiry sweep reads them every pass, and the canary's B-05
 * the same way. A row is created no later than it begins to wait, so `created_at < cutoff` adds
 * nothing to the answer and makes the read a range of executions_status_recent (status,
 * created_at): without it the other conditions are filters over every queued row, and a sweep every
 * reaper interval (2 s) read the whole backlog, on SQLite on the event loop.
 */
export function waitingSince(eb: ExpressionBuilder<DB, 'executions'>, cutoff: number): Expression<SqlBool> {
  return eb.and([
    eb('status', '=', statusIs('queued')),
    eb('created_at', '<', cutoff),
    eb(eb.fn.coalesce('started_at', 'queued_at'), '<', cutoff),
    eb.or([eb('run_after', 'is', null), eb('run_after', '<', cutoff)]),
  ]);
}
