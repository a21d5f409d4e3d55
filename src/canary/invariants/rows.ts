import { sql } from 'kysely';
import { isTerminal } from '../../domain/states.ts';
import { graces } from '../graces.ts';
import { forScope, inScope, status, statuses } from '../sql.ts';
import type { ActivityInvariant, Finding } from '../types.ts';

const zero = () => 0;
const n = (v: unknown) => (v === null || v === undefined ? null : Number(v));

interface Ended {
  id: string;
  agent: string;
  status: string;
  started_at: number | null;
  completed_at: number | null;
  duration_ms: number | null;
}

/** E-03, over the executions the events since the checkpoint touched (an execution ends by an event). */
export const E03: ActivityInvariant = {
  kind: 'activity',
  id: 'E-03',
  tier: 'A',
  severity: 'warning',
  holds: 'terminal rows have completed_at; rows that ran and ended have duration_ms',
  diagnoses: {
    terminal_without_completed_at:
      'a terminal execution has no completed_at: the transition that ended it forgot the timestamp (src/engine/transitions/)',
    ran_without_duration:
      'an execution that ran and ended has no duration_ms: the transition that ended it forgot it (src/engine/transitions/)',
  },
  grace: zero,
  fullWalksRows: true,
  rows: (tx, scope) =>
    forScope(scope, async (part) => {
      const rows: Ended[] = await tx
        .selectFrom('executions')
        .select(['id', 'agent', 'status', 'started_at', 'completed_at', 'duration_ms'])
        .where((eb) => inScope(eb, 'id', part))
        // Finished, said as "not live", which no index seeks: with `status IN (the finished
        // states)` SQLite without statistics read a full check's id range as a seek per status
        // into executions_status_recent (every finished row, once per chunk), not the primary key.
        .where('status', 'not in', statuses(['queued', 'running']))
        .where((eb) =>
          eb.or([
            eb('completed_at', 'is', null),
            eb.and([eb('status', '<>', status('skipped')), eb('started_at', 'is not', null), eb('duration_ms', 'is', null)]),
          ]),
        )
        .execute();
      return judgeEnded(
        rows.map((r) => ({ ...r, started_at: n(r.started_at), completed_at: n(r.completed_at), duration_ms: n(r.duration_ms) })),
      );
    }),
};

function judgeEnded(rows: Ended[]): Finding[] {
  const out: Finding[] = [];
  for (const r of rows) {
    if (!isTerminal(r.status)) continue;
    if (r.completed_at === null)
      out.push({ subject: r.id, agent: r.agent, reason: 'terminal_without_completed_at', detail: { status: r.status } });
    else if (r.status !== 'skipped' && r.started_at !== null && r.duration_ms === null)
      out.push({ subject: r.id, agent: r.agent, reason: 'ran_without_duration', detail: { status: r.status } });
  }
  return out;
}

interface RetryRow {
  id: string;
  agent: string;
  retry_of: string;
  target_agent: string | null;
}

/** E-07, over touched executions: retry_of is set when the retry is created (an event). */
export const E07: ActivityInvariant = {
  kind: 'activity',
  id: 'E-07',
  tier: 'A',
  severity: 'warning',
  holds: 'retry_of points to an existing execution of the same agent',
  diagnoses: {
    retry_target_missing: 'an execution is a retry of an execution that does not exist: the retry path linked a wrong id',
    retry_other_agent: "an execution is a retry of another agent's execution: the retry path crossed agents",
    retry_self: 'an execution is a retry of itself: the retry path linked the wrong id',
  },
  grace: zero,
  fullWalksRows: true,
  rows: (tx, scope) =>
    forScope(scope, async (part) => {
      // Every row in scope comes back (id, agent, two ids): filtering on retry_of in SQL would
      // let the planner walk the executions_retry_of partial index instead of seeking the ids.
      const rows = (await tx
        .selectFrom('executions as e')
        .leftJoin('executions as r', 'r.id', 'e.retry_of')
        .select(['e.id', 'e.agent', 'e.retry_of', 'r.agent as target_agent'])
        .where((eb) => inScope(eb, 'e.id', part))
        .execute()) as Array<Omit<RetryRow, 'retry_of'> & { retry_of: string | null }>;
      return rows.flatMap((r): Finding[] => {
        if (r.retry_of === null) return [];
        if (r.retry_of === r.id) return [{ subject: r.id, agent: r.agent, reason: 'retry_self' }];
        if (r.target_agent === null)
          return [{ subject: r.id, agent: r.agent, reason: 'retry_target_missing', detail: { retry_of: r.retry_of } }];
        if (r.target_agent !== r.agent)
          return [{ subject: r.id, agent: r.agent, reason: 'retry_other_agent', detail: { retry_of: r.retry_of } }];
        return [];
      });
    }),
};

interface Times {
  id: string;
  agent: string;
  queued_at: number | null;
  started_at: number | null;
  completed_at: number | null;
}

/** G-03, over touched executions (each timestamp is written by a transition, with its event). Allows the stated clock skew. */
export const G03: ActivityInvariant = {
  kind: 'activity',
  id: 'G-03',
  tier: 'A',
  severity: 'warning',
  holds: 'queued_at ≤ started_at ≤ completed_at where present',
  diagnoses: {
    started_before_queued: 'an execution started before it was queued: a server clock is off or a transition stamped the wrong time',
    completed_before_started: 'an execution completed before it started: a server clock is off or a transition stamped the wrong time',
    completed_before_queued: 'an execution completed before it was queued: a server clock is off or a transition stamped the wrong time',
  },
  grace: graces.clockSkew,
  fullWalksRows: true,
  rows: (tx, scope, { graceMs }) =>
    forScope(scope, async (part) => {
      const g = sql<number>`cast(${graceMs} as bigint)`;
      const rows = await tx
        .selectFrom('executions')
        .select(['id', 'agent', 'queued_at', 'started_at', 'completed_at'])
        .where((eb) => inScope(eb, 'id', part))
        .where((eb) =>
          eb.or([
            eb('queued_at', '>', sql<number>`started_at + ${g}`),
            eb('started_at', '>', sql<number>`completed_at + ${g}`),
            eb('queued_at', '>', sql<number>`completed_at + ${g}`),
          ]),
        )
        .execute();
      const out: Finding[] = [];
      const after = (a: number | null, b: number | null) => a !== null && b !== null && a > b + graceMs;
      for (const raw of rows) {
        const r: Times = { ...raw, queued_at: n(raw.queued_at), started_at: n(raw.started_at), completed_at: n(raw.completed_at) };
        if (after(r.queued_at, r.started_at))
          out.push({ subject: r.id, agent: r.agent, reason: 'started_before_queued', detail: { early_ms: r.queued_at! - r.started_at! } });
        else if (after(r.started_at, r.completed_at))
          out.push({
            subject: r.id,
            agent: r.agent,
            reason: 'completed_before_started',
            detail: { early_ms: r.started_at! - r.completed_at! },
          });
        else if (after(r.queued_at, r.completed_at))
          out.push({
            subject: r.id,
            agent: r.agent,
            reason: 'completed_before_queued',
            detail: { early_ms: r.queued_at! - r.completed_at! },
          });
      }
      return out;
    }),
};
