import { isTerminal } from '../../domain/states.ts';
import { graces } from '../graces.ts';
import { forScope } from '../sql.ts';
import { touchedRows } from '../touched.ts';
import type { ActivityInvariant, Finding, Touched } from '../types.ts';

const zero = () => 0;

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
  rows: (tx, scope, ctx) => forScope(scope, async (part) => judgeEnded(await touchedRows(tx, part, ctx))),
};

function judgeEnded(rows: readonly Touched[]): Finding[] {
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
  rows: (tx, scope, ctx) =>
    forScope(scope, async (part) => {
      const retries = (await touchedRows(tx, part, ctx)).filter((r) => r.retry_of !== null);
      if (retries.length === 0) return [];
      // The targets as they are now, by primary key (most are among the rows read already).
      const others = retries.filter((r) => r.retry_of !== r.id).map((r) => r.retry_of!);
      const targets = new Map((await touchedRows(tx, { ids: others }, ctx)).map((t) => [t.id, t.agent]));
      return retries.flatMap((r): Finding[] => {
        if (r.retry_of === r.id) return [{ subject: r.id, agent: r.agent, reason: 'retry_self' }];
        const target = targets.get(r.retry_of!);
        if (target === undefined)
          return [{ subject: r.id, agent: r.agent, reason: 'retry_target_missing', detail: { retry_of: r.retry_of } }];
        if (target !== r.agent) return [{ subject: r.id, agent: r.agent, reason: 'retry_other_agent', detail: { retry_of: r.retry_of } }];
        return [];
      });
    }),
};

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
  rows: (tx, scope, ctx) =>
    forScope(scope, async (part) => {
      const { graceMs } = ctx;
      const out: Finding[] = [];
      const after = (a: number | null, b: number | null) => a !== null && b !== null && a > b + graceMs;
      for (const r of await touchedRows(tx, part, ctx)) {
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
