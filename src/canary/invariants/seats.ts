import type { ExpressionBuilder } from 'kysely';
import { queuedExpr } from '../../engine/backlog.ts';
import { inIndexOrder } from '../../engine/candidates.ts';
import type { StoreKind } from '../../store/adapter.ts';
import type { DB } from '../../store/schema.ts';
import { status } from '../sql.ts';
import type { Finding, StateInvariant } from '../types.ts';

/** The number of `agents as a`'s running executions, counted through the partial index executions_running. */
const runningOfAgent = (eb: ExpressionBuilder<DB & { a: DB['agents'] }, 'a'>) =>
  eb
    .selectFrom('executions as e')
    .select((e) => e.fn.countAll<number>().as('n'))
    .whereRef('e.agent', '=', 'a.name')
    .where('e.status', '=', status('running'));

/**
 * The number of `agents as a`'s queued executions, walked in executions_admission's order on
 * PostgreSQL: read under inIndexOrder, no plan but that index's (the agent's queued entries) can
 * deliver it (SQLite, with no statistics, seeks by agent unasked and would sort). Left to
 * choose, PostgreSQL with statistics of before the queue grew seeks executions_status_recent by
 * status and reads every agent's queued rows for each agent.
 */
export const queuedOfAgent = (eb: ExpressionBuilder<DB & { a: DB['agents'] }, 'a'>, kind: StoreKind) =>
  eb
    .selectFrom(
      eb
        .selectFrom('executions as e')
        .select('e.id')
        .whereRef('e.agent', '=', 'a.name')
        .where('e.status', '=', status('queued'))
        .$if(kind === 'postgres', (q) => q.orderBy('e.priority').orderBy('e.fair_round').orderBy('e.queued_at').orderBy('e.id'))
        .as('q'),
    )
    .select((q) => q.fn.countAll<number>().as('n'));

interface SeatRow {
  name: string;
  running_count: number;
  running_rows: number;
}

/**
 * S-04. Admission decides from the counter (`agents.running_count`), so a counter that drifted from
 * the rows would admit past the cap (too low) or starve the agent (too high). Reads one row per
 * agent and counts running rows through the partial index executions_running: cost follows the
 * agents and what runs now, never history.
 */
export const S04: StateInvariant<SeatRow> = {
  kind: 'state',
  id: 'S-04',
  tier: 'A',
  severity: 'critical',
  holds: "each agent's seat counter (running_count) equals its running executions",
  diagnoses: {
    counter_mismatch:
      "an agent's running_count differs from its running rows: the event trigger that keeps it (migration 0019) is missing or was bypassed, or a row changed agent; admission trusts the counter (transitions/admit.ts)",
  },
  grace: () => 0,
  async population(tx) {
    return tx
      .selectFrom('agents as a')
      .select(['a.name', 'a.running_count'])
      .select((eb) => runningOfAgent(eb).as('running_rows'))
      .execute() as Promise<SeatRow[]>;
  },
  evaluate(rows) {
    const out: Finding[] = [];
    for (const r of rows) {
      const counted = Number(r.running_count);
      const running = Number(r.running_rows);
      if (counted !== running)
        out.push({ subject: r.name, agent: r.name, reason: 'counter_mismatch', detail: { running_count: counted, running_rows: running } });
    }
    return out;
  },
};

interface BacklogRow {
  name: string;
  /** Null when the agent has no agent_backlog row (its creation trigger bypassed). */
  backlog: number | null;
  queued_rows: number;
}

/**
 * S-05. Creation decides from the backlog counters (`agent_backlog.queued_in - agents.queued_out`,
 * engine/backlog.ts), as do the agents list and /metrics: a counter that drifted from the rows
 * would let an agent's queue grow past max_backlog (too low) or refuse its work (too high). Reads
 * one row per agent and counts its queued rows through the partial index executions_admission
 * (queuedOfAgent): cost follows the agents and their backlogs, never history.
 */
export const S05: StateInvariant<BacklogRow> = {
  kind: 'state',
  id: 'S-05',
  tier: 'A',
  severity: 'critical',
  holds: "each agent's backlog counters (queued_in - queued_out) equal its queued executions",
  diagnoses: {
    backlog_counter_mismatch:
      "an agent's queued_in - queued_out differs from its queued rows: the triggers that keep them (migration 0023 SQLite / 0031 PostgreSQL) are missing or were bypassed, or a row changed agent; creation trusts the counters (engine/backlog.ts)",
  },
  grace: () => 0,
  async population(tx, ctx) {
    return inIndexOrder({ kind: ctx.kind }, tx, () =>
      tx
        .selectFrom('agents as a')
        .leftJoin('agent_backlog as b', 'b.agent', 'a.name')
        .select(['a.name', queuedExpr().as('backlog')])
        .select((eb) => queuedOfAgent(eb, ctx.kind).as('queued_rows'))
        .execute(),
    ) as Promise<BacklogRow[]>;
  },
  evaluate(rows) {
    const out: Finding[] = [];
    for (const r of rows) {
      const backlog = r.backlog === null ? null : Number(r.backlog);
      const queued = Number(r.queued_rows);
      if (backlog !== queued)
        out.push({ subject: r.name, agent: r.name, reason: 'backlog_counter_mismatch', detail: { backlog, queued_rows: queued } });
    }
    return out;
  },
};
