import { sql, type Expression, type ExpressionBuilder, type SqlBool } from 'kysely';
import type { Tx } from '../../store/adapter.ts';
import type { DB } from '../../store/schema.ts';
import { graces } from '../graces.ts';
import { status } from '../sql.ts';
import { MAX_FINDINGS, type Finding, type StateInvariant } from '../types.ts';

interface RunningRow {
  id: string;
  agent: string;
  lease_owner: string | null;
  lease_token: string | null;
  lease_expires_at: number | null;
  lease_ttl_seconds: number;
  deadline_at: number | null;
}

const num = (v: unknown) => (v === null || v === undefined ? null : Number(v));
const normalise = (rows: RunningRow[]) =>
  rows.map((r) => ({ ...r, lease_expires_at: num(r.lease_expires_at), deadline_at: num(r.deadline_at) }));

/**
 * Running rows matching `where`, oldest first, at most MAX_FINDINGS + 1 (one more tells the list
 * was cut). In the order of executions_status_recent, whose `running` range holds the running
 * rows only: a walk of that range that stops at the limit, never a sort (ordered by id alone,
 * SQLite would sort every running row it finds there).
 */
async function runningRows(tx: Tx, where: (eb: ExpressionBuilder<DB, 'executions'>) => Expression<SqlBool>): Promise<RunningRow[]> {
  const rows = await tx
    .selectFrom('executions')
    .select(['id', 'agent', 'lease_owner', 'lease_token', 'lease_expires_at', 'lease_ttl_seconds', 'deadline_at'])
    .where('status', '=', status('running'))
    .where(where)
    .orderBy('created_at')
    .orderBy('id')
    .limit(MAX_FINDINGS + 1)
    .execute();
  return normalise(rows);
}

/**
 * E-01. Its population is running rows with a lease expiry or deadline well in the past. A
 * running row without a lease cannot exist (the running_has_lease CHECK; S-03 reports it if it
 * ever does), so E-01 is never about a missing lease: "unleased but healthy" means a row that
 * holds no lapsed lease — a running row inside its lease, or a row the reaper already handed
 * back (queued, lease cleared) — and those never fire.
 */
export const E01: StateInvariant<RunningRow> = {
  kind: 'state',
  id: 'E-01',
  tier: 'B',
  severity: 'critical',
  holds: 'no running row whose lease lapsed, or whose deadline passed, more than the reaper grace ago',
  diagnoses: {
    lease_lapsed:
      'a running execution kept a lease that lapsed beyond the grace: the reaper is not running or failing (engine reapOnce / transitions/expire.ts)',
    past_timeout: 'a running execution is past its timeout beyond the grace: the reaper timeout sweep is failing (transitions/expire.ts)',
  },
  grace: graces.leaseLapse,
  async population(tx, { now, graceMs }) {
    const cutoff = now - graceMs;
    return runningRows(tx, (eb) => eb.or([eb('lease_expires_at', '<', cutoff), eb('deadline_at', '<', cutoff)]));
  },
  evaluate(rows, { now, graceMs }) {
    const out: Finding[] = [];
    for (const r of rows) {
      if (r.deadline_at !== null && r.deadline_at < now - graceMs) {
        out.push({ subject: r.id, agent: r.agent, reason: 'past_timeout', detail: { over_ms: now - r.deadline_at } });
      } else if (r.lease_expires_at !== null && r.lease_expires_at < now - graceMs) {
        out.push({ subject: r.id, agent: r.agent, reason: 'lease_lapsed', detail: { lapsed_ms: now - r.lease_expires_at } });
      }
    }
    return out;
  },
};

/** S-03. The database CHECK enforces the first half; the lease horizon is the part only code guards. */
export const S03: StateInvariant<RunningRow> = {
  kind: 'state',
  id: 'S-03',
  tier: 'A',
  severity: 'critical',
  holds: 'every running row has a lease owner, token and expiry, and its expiry lies no further ahead than its TTL',
  diagnoses: {
    lease_missing:
      'a running execution holds no complete lease: a status writer set running without a lease (transitions/admit.ts) or the running_has_lease constraint is gone',
    lease_beyond_ttl:
      'a running lease reaches further ahead than its TTL: renewal wrote a wrong expiry (transitions/renew.ts), so a dead worker would hold its seat too long',
  },
  grace: graces.leaseHorizon,
  async population(tx, { now, graceMs }) {
    return runningRows(tx, (eb) =>
      eb.or([
        eb('lease_owner', 'is', null),
        eb('lease_token', 'is', null),
        eb('lease_expires_at', 'is', null),
        eb('lease_expires_at', '>', sql<number>`cast(${now + graceMs} as bigint) + lease_ttl_seconds * 1000`),
      ]),
    );
  },
  evaluate(rows, { now, graceMs }) {
    const out: Finding[] = [];
    for (const r of rows) {
      if (!r.lease_owner || !r.lease_token || r.lease_expires_at === null) {
        out.push({ subject: r.id, agent: r.agent, reason: 'lease_missing' });
      } else if (r.lease_expires_at > now + graceMs + r.lease_ttl_seconds * 1000) {
        out.push({
          subject: r.id,
          agent: r.agent,
          reason: 'lease_beyond_ttl',
          detail: { ahead_ms: r.lease_expires_at - now, lease_ttl_seconds: r.lease_ttl_seconds },
        });
      }
    }
    return out;
  },
};
