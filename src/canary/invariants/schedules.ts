import { sql } from 'kysely';
import { graces } from '../graces.ts';
import { MAX_FINDINGS, type StateInvariant } from '../types.ts';

interface OverdueSchedule {
  id: string;
  agent: string;
  enabled: number | boolean;
  next_run_at: number;
  misfire_grace_seconds: number;
}

/** E-06. Seeks the schedules_due partial index: enabled schedules due before now − grace. */
export const E06: StateInvariant<OverdueSchedule> = {
  kind: 'state',
  id: 'E-06',
  tier: 'B',
  severity: 'critical',
  holds: "no enabled schedule's next_run_at lies further in the past than its misfire grace (plus two scheduler ticks)",
  diagnoses: {
    schedule_overdue: 'an enabled schedule is overdue beyond its misfire grace: the scheduler is stuck or not running',
  },
  grace: graces.schedulerLag,
  async population(tx, { now, graceMs }) {
    const rows = await tx
      .selectFrom('schedules')
      .select(['id', 'agent', 'enabled', 'next_run_at', 'misfire_grace_seconds'])
      .where('enabled', '=', sql.lit(1))
      .where('next_run_at', 'is not', null)
      // The first bound seeks the index (misfire grace is never negative); the second decides.
      .where('next_run_at', '<', now - graceMs)
      .where('next_run_at', '<', sql<number>`cast(${now - graceMs} as bigint) - misfire_grace_seconds * 1000`)
      .orderBy('id')
      .limit(MAX_FINDINGS + 1)
      .execute();
    return rows.map((r) => ({ ...r, next_run_at: Number(r.next_run_at), misfire_grace_seconds: Number(r.misfire_grace_seconds) }));
  },
  evaluate(rows, { now, graceMs }) {
    return rows
      .filter((s) => (s.enabled === 1 || s.enabled === true) && s.next_run_at < now - graceMs - s.misfire_grace_seconds * 1000)
      .map((s) => ({
        subject: s.id,
        agent: s.agent,
        reason: 'schedule_overdue',
        detail: { overdue_ms: now - s.next_run_at, misfire_grace_seconds: s.misfire_grace_seconds },
      }));
  },
};
