import type { Generated, Insertable, Selectable, Updateable } from 'kysely';
import type { ExecutionStatus, TriggerKind } from '../domain/states.ts';

/** Row types, mirroring src/store/migrations. Every timestamp is UTC epoch milliseconds. */

export interface AgentsTable {
  name: string;
  max_parallel: number;
  max_backlog: number;
  timeout_seconds: number;
  lease_ttl_seconds: number;
  max_redeliveries: number;
  delivery: 'pull' | 'push';
  push_url: string | null;
  description: string | null;
  created_at: number;
  updated_at: number;
}

export interface ExecutionsTable {
  id: string;
  agent: string;
  schedule_id: string | null;
  scheduled_for: number | null;
  trigger_kind: TriggerKind;
  /** JSON: who asked (api key id, source agent, webhook id, address). */
  origin: string;
  message: string;
  /** JSON text. */
  payload: string;
  priority: number;
  run_after: number | null;
  status: ExecutionStatus;
  /** Deliveries charged so far (a claim adds one; a graceful release gives it back). */
  attempt: number;
  max_redeliveries: number;
  timeout_seconds: number;
  lease_ttl_seconds: number;
  lease_owner: string | null;
  lease_token: string | null;
  lease_expires_at: number | null;
  heartbeat_at: number | null;
  deadline_at: number | null;
  cancel_requested_at: number | null;
  created_at: number;
  queued_at: number | null;
  started_at: number | null;
  completed_at: number | null;
  duration_ms: number | null;
  result: string | null;
  error_code: string | null;
  error_message: string | null;
  usage: string | null;
  retry_of: string | null;
  idempotency_key: string | null;
  /** The last status change (copied into execution_events by a database trigger). */
  changed_at: number;
  changed_by: string;
  change_reason: string | null;
}

export interface ExecutionEventsTable {
  id: Generated<number>;
  execution_id: string;
  agent: string;
  from_status: ExecutionStatus | null;
  to_status: ExecutionStatus;
  at: number;
  actor: string;
  reason: string | null;
  attempt: number;
  /** On admission: running rows of the agent including this one, and the cap seen. */
  seats_in_use: number | null;
  seat_cap: number | null;
}

export interface AuditLogTable {
  id: Generated<number>;
  at: number;
  actor: string;
  action: string;
  subject: string | null;
  execution_id: string | null;
  detail: string | null;
}

export interface ApiKeysTable {
  id: string;
  name: string;
  secret_hash: string;
  scope: 'admin' | 'agent';
  agent: string | null;
  created_at: number;
  revoked_at: number | null;
}

export interface BatonMigrationsTable {
  version: number;
  name: string;
  applied_at: number;
}

export interface DB {
  agents: AgentsTable;
  executions: ExecutionsTable;
  execution_events: ExecutionEventsTable;
  audit_log: AuditLogTable;
  api_keys: ApiKeysTable;
  baton_migrations: BatonMigrationsTable;
}

export type AgentRow = Selectable<AgentsTable>;
export type ExecutionRow = Selectable<ExecutionsTable>;
export type NewExecution = Insertable<ExecutionsTable>;
export type ExecutionUpdate = Updateable<ExecutionsTable>;
export type ExecutionEventRow = Selectable<ExecutionEventsTable>;
export type ApiKeyRow = Selectable<ApiKeysTable>;
export type AuditRow = Selectable<AuditLogTable>;
