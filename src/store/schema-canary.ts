import type { Generated } from 'kysely';
import type { AlertSinkKind, AlertStatus, Severity, Tier, ViolationTransition } from '../domain/canary.ts';

/** The canary's tables (src/canary), part of DB in schema.ts; timestamps are UTC epoch milliseconds. */

export interface CanaryViolationsTable {
  id: Generated<number>;
  invariant: string;
  /** The execution id, agent, schedule or event the finding is about ('canary' for H-01). */
  subject: string;
  agent: string | null;
  tier: Tier;
  severity: Severity;
  /** Reason code (e.g. lease_lapsed); never free text copied from a row. */
  reason: string;
  /** JSON object of ids and numbers only. */
  detail: string | null;
  first_seen: number;
  last_seen: number;
  resolved_at: number | null;
}

export interface CanaryStateTable {
  id: string;
  lease_owner: string | null;
  lease_expires_at: number | null;
  last_started_at: number | null;
  last_completed_at: number | null;
  last_ok: number | null;
  last_duration_ms: number | null;
  seen_executions: number | null;
  seen_event_id: number | null;
  cycles: Generated<number>;
}

export interface CanaryAlertsTable {
  id: Generated<number>;
  invariant: string;
  transition: ViolationTransition;
  sink: AlertSinkKind;
  body: string;
  status: AlertStatus;
  attempts: Generated<number>;
  next_attempt_at: number;
  last_error: string | null;
  created_at: number;
  delivered_at: number | null;
}

/** The canary's high-water mark in the event log, per invariant. `state`: JSON carried forward. */
export interface CanaryCheckpointsTable {
  invariant: string;
  event_id: number;
  state: string | null;
  updated_at: number;
}
