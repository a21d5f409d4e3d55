import { sql, type SelectQueryBuilder } from 'kysely';
import { inIndexOrder } from '../../engine/candidates.ts';
import type { Tx } from '../../store/adapter.ts';
import type { DB } from '../../store/schema.ts';
import { status } from '../sql.ts';
import { idChunks, MAX_FINDINGS, type CheckContext, type Finding, type StateInvariant } from '../types.ts';

interface QueuedRow {
  id: string;
  agent: string;
  agent_exists: string | null;
  /** 1 when the payload is JSON (json_valid, in the database: no payload is read here). */
  payload_ok: number;
  origin_ok: number;
  attempt: number;
  max_redeliveries: number;
}

/** A place in the queue in executions_status_recent's order (newest first). */
interface Place {
  created_at: number;
  id: string;
}

type QueueRead = SelectQueryBuilder<DB & { e: DB['executions'] }, 'e', object>;

/** Before `p` in the walk (older): one range of executions_status_recent after its status. */
const after = (q: QueueRead, p: Place | undefined) => (p ? q.where(sql<boolean>`(e.created_at, e.id) < (${p.created_at}, ${p.id})`) : q);

/**
 * The last row of the slice that starts after `from`, or undefined when the slice reaches the
 * queue's oldest row. Reads at most the slice's entries of executions_status_recent, walked in
 * its order (no sorting plan left to PostgreSQL: with statistics of before a backlog it would
 * take executions_admission and sort).
 */
async function sliceEnd(tx: Tx, from: Place | undefined, rows: number): Promise<Place | undefined> {
  const r = await after(tx.selectFrom('executions as e').where('e.status', '=', status('queued')), from)
    .select(['e.created_at', 'e.id'])
    .orderBy('e.created_at', 'desc')
    .orderBy('e.id', 'desc')
    .limit(1)
    .offset(rows - 1)
    .executeTakeFirst();
  return r ? { created_at: Number(r.created_at), id: r.id } : undefined;
}

/** The queued rows that break E-04, of `scope`: only they leave the database. */
function broken(tx: Tx, scope: (q: QueueRead) => QueueRead) {
  return (
    scope(tx.selectFrom('executions as e').where('e.status', '=', status('queued')))
      .leftJoin('agents as a', 'a.name', 'e.agent')
      .select(['e.id', 'e.agent', 'a.name as agent_exists', 'e.attempt', 'e.max_redeliveries'])
      // SQLite's json_valid, or the function of that name the PostgreSQL schema defines.
      .select([sql<number>`json_valid(e.payload)`.as('payload_ok'), sql<number>`json_valid(e.origin)`.as('origin_ok')])
      .where((eb) =>
        eb.or([
          eb('a.name', 'is', null),
          eb(sql`json_valid(e.payload)`, '<>', 1),
          eb(sql`json_valid(e.origin)`, '<>', 1),
          eb('e.attempt', '<', 0),
          eb('e.attempt', '>', eb.ref('e.max_redeliveries')),
        ]),
      )
  );
}

/**
 * The slice's broken rows (one range of executions_status_recent, newest first, at most
 * MAX_FINDINGS + 1 of them: more make the check truncated) and the open subjects' rows, judged
 * again each cycle (by primary key) so a violation outside this slice is not taken for resolved.
 * A full check (no cursor) reads the whole queue.
 */
async function readQueue(tx: Tx, ctx: CheckContext): Promise<QueuedRow[]> {
  const from = ctx.slices?.get() as Place | undefined;
  const end = ctx.slices ? await sliceEnd(tx, from, ctx.slices.rows) : undefined;
  ctx.slices?.set(end);
  const slice = await broken(tx, (q) =>
    after(q, from).$if(end !== undefined, (q) => q.where(sql<boolean>`(e.created_at, e.id) >= (${end!.created_at}, ${end!.id})`)),
  )
    .orderBy('e.created_at', 'desc')
    .orderBy('e.id', 'desc')
    .limit(MAX_FINDINGS + 1)
    .execute();
  const out: QueuedRow[] = [...slice];
  const seen = new Set(slice.map((r) => r.id));
  for (const ids of idChunks([...(ctx.open ?? [])].filter((id) => !seen.has(id))))
    out.push(...(await broken(tx, (q) => q.where('e.id', 'in', ids)).execute()));
  return out;
}

/**
 * E-04. Each queued row's payload is checked in the database, the queue a slice a cycle
 * (CheckContext.slices): a cycle's cost is bounded however deep the backlog, never grows with
 * history, and every queued row is checked within a lap of the queue. The open violations are
 * judged every cycle.
 */
export const E04: StateInvariant<QueuedRow> = {
  kind: 'state',
  id: 'E-04',
  tier: 'A',
  severity: 'critical',
  holds: 'queued rows carry valid metadata: their agent exists, payload and origin parse, attempts are within the redelivery limit',
  diagnoses: {
    agent_missing:
      'a queued execution names an agent that does not exist: agent deletion did not cancel its queue, or a create path skipped the agent lookup (Agents.delete in engine/agents.ts, transitions/create.ts)',
    payload_invalid: 'a queued execution carries a payload that is not JSON: a create path stored it unserialised (transitions/create.ts)',
    origin_invalid: 'a queued execution carries an origin that is not JSON: a create path stored it unserialised (transitions/create.ts)',
    attempt_out_of_range:
      'a queued execution has spent more deliveries than its limit: the reaper should have parked it as poisoned (transitions/expire.ts)',
  },
  grace: () => 0,
  population: (tx, ctx) => inIndexOrder({ kind: ctx.kind }, tx, () => readQueue(tx, ctx)),
  evaluate(rows) {
    const out: Finding[] = [];
    for (const r of rows) {
      const f = (reason: string, detail?: Finding['detail']) => out.push({ subject: r.id, agent: r.agent, reason, detail });
      if (r.agent_exists === null) f('agent_missing');
      else if (Number(r.payload_ok) !== 1) f('payload_invalid');
      else if (Number(r.origin_ok) !== 1) f('origin_invalid');
      else if (r.attempt < 0 || r.attempt > r.max_redeliveries)
        f('attempt_out_of_range', { attempt: r.attempt, max_redeliveries: r.max_redeliveries });
    }
    return out;
  },
};
