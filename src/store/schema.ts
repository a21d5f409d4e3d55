import type { Generated, Insertable, Selectable, Updateable } from 'kysely';
import type { BreakerState } from '../domain/breaker.ts';
import type { BudgetWindow } from '../domain/budget.ts';
import type { CanaryAlertsTable, CanaryCheckpointsTable, CanaryStateTable, CanaryViolationsTable } from './schema-canary.ts';
import type { DeliveryMode } from '../domain/delivery.ts';
import type { MisfirePolicy, OverlapPolicy } from '../domain/policies.ts';
import type { ExecutionStatus, TriggerKind } from '../domain/states.ts';

export type { CanaryAlertsTable, CanaryCheckpointsTable, CanaryStateTable, CanaryViolationsTable };

/** Row types, mirroring src/store/migrations. Every timestamp is UTC epoch milliseconds. */

export interface AgentsTable {
  name: string;
  max_parallel: number;
  max_backlog: number;
  timeout_seconds: number;
  lease_ttl_seconds: number;
  max_redeliveries: number;
  delivery: DeliveryMode;
  push_url: string | null;
  /** AES-256-GCM ciphertext of the push signing secret; never returned by the API. */
  push_secret: string | null;
  description: string | null;
  created_at: number;
  updated_at: number;
  /** JSON RetryPolicy (src/domain/retry.ts), or null: no retries. */
  retry_policy: Generated<string | null>;
  /** Pause: set together when an operator paused the agent, null when it admits. */
  paused_at: Generated<number | null>;
  paused_by: Generated<string | null>;
  paused_reason: Generated<string | null>;
  /** When a claim last ran admission for it, stamped at most every CLAIM_STAMP_EVERY_MS. */
  last_claim_at: Generated<number | null>;
  /** Shared-cause lapse hold: set together when the reaper held the agent, null otherwise. */
  lapse_hold_at: Generated<number | null>;
  lapse_hold_count: Generated<number | null>;
  /** Circuit breaker (src/domain/breaker.ts): JSON BreakerConfig, or null: off. */
  breaker_config: Generated<string | null>;
  breaker_state: Generated<BreakerState>;
  breaker_consecutive: Generated<number>;
  /** The last N counted outcomes, oldest first: '1' failed, '0' succeeded. */
  breaker_recent: Generated<string>;
  breaker_opened_at: Generated<number | null>;
  breaker_until: Generated<number | null>;
  breaker_probe_id: Generated<string | null>;
  breaker_cooldown_ms: Generated<number | null>;
  /** Budget (src/domain/budget.ts): JSON Budget, or null: no limits. */
  budget: Generated<string | null>;
  /**
   * Seats in use: the agent's running executions, kept by the event trigger on every change
   * into or out of `running`; admission reads it from the row it locks. The canary checks it (S-04).
   */
  running_count: Generated<number>;
  /**
   * Executions that left `queued` less those that came back to it,
   * kept by the event trigger beside running_count. The agent's backlog is
   * agent_backlog.queued_in - queued_out (engine/backlog.ts); the canary checks it (S-04).
   */
  queued_out: Generated<number>;
  /**
   * The fast paths' facts (src/domain/fast-paths.ts), kept by the engine (engine/fast-path-facts.ts):
   * 1 when no hold can apply (a claim may take the store's claimMany), and when no completion side
   * effect of the agent can apply (a completion may take its completeMany).
   */
  fast_claim: Generated<number>;
  fast_complete: Generated<number>;
  /** Concurrency keys (src/domain/flow.ts): the highest fairness round admitted so far. */
  admit_round: Generated<number>;
  /** The default cap on running tasks per key (null: none). */
  key_max_parallel: Generated<number | null>;
  /** JSON {"key": cap}: caps of single keys, over key_max_parallel. */
  key_overrides: Generated<string | null>;
  /** JSON Throttle (src/domain/throttle.ts) applied to each key separately. */
  key_throttle: Generated<string | null>;
  /** The pools it draws from (src/domain/pools.ts): a JSON array of names in order, or null: none. */
  pools: Generated<string | null>;
  /** Its throttle (src/domain/throttle.ts): JSON Throttle, or null: none; `throttle_tat` its state. */
  throttle: Generated<string | null>;
  throttle_tat: Generated<number | null>;
}

/** A pool (src/domain/pools.ts): limits shared by the agents that draw from it. */
export interface PoolsTable {
  name: string;
  description: Generated<string | null>;
  /** Seats shared by its agents' running tasks; null: no seat limit. */
  max_parallel: Generated<number | null>;
  throttle: Generated<string | null>;
  throttle_tat: Generated<number | null>;
  /** JSON Budget, spent by its agents' completions; null: none. */
  budget: Generated<string | null>;
  created_at: number;
  updated_at: number;
}

/** Which agent draws from which pool (the pool's side of agents.pools). */
export interface AgentPoolsTable {
  agent: string;
  pool: string;
}

/** A member of a pool waiting for its turn at a seat (src/domain/pool-turns.ts). */
export interface PoolWaitsTable {
  pool: string;
  agent: string;
  /** When it was first refused for lack of a seat, in this wait. */
  since: number;
  /** When a claim of it last looked and was refused for lack of a seat. */
  seen_at: number;
}

/** A pool's spending in one window, added to by each completion of its agents. */
export interface PoolBudgetLedgerTable {
  pool: string;
  window_kind: BudgetWindow;
  window_start: number;
  cost_usd: Generated<number>;
  total_tokens: Generated<number>;
  run_ms: Generated<number>;
  updated_at: number;
}

/** An agent's executions created queued: written only by creators, under their new-work turn. */
export interface AgentBacklogTable {
  agent: string;
  queued_in: Generated<number>;
}

/** Budget ledger: an agent's spending in one window, added to by each completion. */
export interface AgentBudgetLedgerTable {
  agent: string;
  window_kind: BudgetWindow;
  window_start: number;
  cost_usd: Generated<number>;
  total_tokens: Generated<number>;
  run_ms: Generated<number>;
  /** When the 80 % alert fired in this window, or null. */
  alerted_at: Generated<number | null>;
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
  /** Effective JSON RetryPolicy copied at creation (task, else schedule, else agent). */
  retry_policy: Generated<string | null>;
  /** 0 for a first run; n for the n-th retry in its chain. */
  retry_number: Generated<number>;
  /** The chain's first execution (null on a first run). */
  retry_root: Generated<string | null>;
  /** The webhook whose delivery created it. */
  webhook_id: Generated<string | null>;
  /** Rows sharing a serial key are admitted one at a time (schedule overlap policy `queue`). */
  serial_key: Generated<string | null>;
  /** Lapses forgiven as shared-cause, capped by MAX_FORGIVEN_LAPSES. */
  lapses_forgiven: Generated<number>;
  /** A chained task's source execution; null for work no subscription started. */
  caused_by: Generated<string | null>;
  /** The subscription that started a chained task. */
  subscription_id: Generated<string | null>;
  /** 0 unless a subscription started it: then its source's depth + 1 (capped by BATON_CHAIN_DEPTH_LIMIT). */
  chain_depth: Generated<number>;
  /** The group it belongs to: a member (with group_index, kept by its retries) or the join (no index). */
  group_id: Generated<string | null>;
  group_index: Generated<number | null>;
  /** 1 when no side effect of this execution's own can follow its completion (src/domain/fast-paths.ts); set at creation. */
  fast_complete: Generated<number>;
  /** Its concurrency key (API `key`), and its fairness round among the agent's keys (0: no key). */
  flow_key: Generated<string | null>;
  fair_round: Generated<number>;
  /** A debounced task's window in seconds: a submit on its key folds into it while queued and not due. */
  debounce_seconds: Generated<number | null>;
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
  /** The task's concurrency key (null: none), so seats per key replay from the log alone. */
  flow_key: Generated<string | null>;
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

export interface SchedulesTable {
  id: string;
  agent: string;
  name: string;
  cron: string;
  timezone: string;
  message: string;
  /** JSON text. */
  payload: string;
  enabled: number;
  overlap_policy: OverlapPolicy;
  misfire_policy: MisfirePolicy;
  misfire_grace_seconds: number;
  retry_policy: string | null;
  priority: number;
  next_run_at: number | null;
  last_run_at: number | null;
  created_at: number;
  updated_at: number;
}

export interface WebhooksTable {
  id: string;
  agent: string;
  schedule_id: string | null;
  name: string;
  token_hash: string;
  secret_enc: string | null;
  message: string;
  overlap_policy: OverlapPolicy;
  enabled: number;
  created_at: number;
  updated_at: number;
  last_delivery_at: number | null;
}

export interface IdempotencyKeysTable {
  scope: string;
  idem_key: string;
  request_hash: string;
  state: 'in_flight' | 'completed';
  locked_until: number;
  status_code: number | null;
  response: string | null;
  execution_id: string | null;
  created_at: number;
  expires_at: number;
}

export interface BatonMigrationsTable {
  version: number;
  name: string;
  applied_at: number;
}

/** One output line of an execution. */
export interface ExecutionLogsTable {
  execution_id: string;
  seq: number;
  at: number;
  stream: 'stdout' | 'stderr' | 'system';
  line: string;
}

/** Running totals of an execution's log, for the bounds. `truncated`: 0 or 1. */
export interface ExecutionLogHeadsTable {
  execution_id: string;
  lines: number;
  bytes: number;
  truncated: number;
}

/** The pruner's record; `pruning` is SQLite's in-transaction flag (always 0 once committed). */
export interface RetentionStateTable {
  id: string;
  pruning: Generated<number>;
  last_started_at: number | null;
  last_completed_at: number | null;
  last_duration_ms: number | null;
  last_executions: number | null;
  last_audit: number | null;
  last_error: string | null;
  total_executions: Generated<number>;
  total_audit: Generated<number>;
}

/** One background pass's leader: the owner runs it until `expires_at`. */
export interface LeaderLeasesTable {
  name: string;
  owner: string;
  expires_at: number;
}

export interface SubscriptionsTable {
  id: string;
  source_agent: string;
  target_agent: string;
  on_status: 'succeeded' | 'failed' | 'cancelled' | 'any';
  schedule_id: string | null;
  trigger_kind: string | null;
  /** Template over the source execution. */
  message: string;
  /** JSON template, or null: the task's payload summarises the source. */
  payload: string | null;
  enabled: number;
  created_at: number;
  created_by: string;
  updated_at: number;
}

/** One per (source, matching subscription): what it started, or why nothing. */
export interface ChainLinksTable {
  source_id: string;
  subscription_id: string;
  execution_id: string | null;
  refused: string | null;
  at: number;
}

export interface ExecutionGroupsTable {
  id: string;
  policy: 'all' | 'all_succeeded' | 'first_succeeded' | 'quorum';
  quorum: number | null;
  size: number;
  status: 'running' | 'succeeded' | 'failed' | 'cancelled';
  finished: number;
  succeeded: number;
  failed: number;
  /** JSON {agent, message, payload?}, or null: no join. */
  join_spec: string | null;
  join_execution_id: string | null;
  join_refused: string | null;
  idempotency_key: string | null;
  created_at: number;
  created_by: string;
  decided_at: number | null;
}

/** One row per (agent, key) ever used: the key's last fairness round and its throttle state. */
export interface FlowKeysTable {
  agent: string;
  flow_key: string;
  last_round: Generated<number>;
  throttle_tat: Generated<number | null>;
}

export interface DB {
  flow_keys: FlowKeysTable;
  subscriptions: SubscriptionsTable;
  chain_links: ChainLinksTable;
  execution_groups: ExecutionGroupsTable;
  agents: AgentsTable;
  agent_backlog: AgentBacklogTable;
  agent_budget_ledger: AgentBudgetLedgerTable;
  pools: PoolsTable;
  agent_pools: AgentPoolsTable;
  pool_budget_ledger: PoolBudgetLedgerTable;
  pool_waits: PoolWaitsTable;
  retention_state: RetentionStateTable;
  leader_leases: LeaderLeasesTable;
  canary_checkpoints: CanaryCheckpointsTable;
  execution_logs: ExecutionLogsTable;
  execution_log_heads: ExecutionLogHeadsTable;
  executions: ExecutionsTable;
  execution_events: ExecutionEventsTable;
  audit_log: AuditLogTable;
  api_keys: ApiKeysTable;
  schedules: SchedulesTable;
  webhooks: WebhooksTable;
  idempotency_keys: IdempotencyKeysTable;
  baton_migrations: BatonMigrationsTable;
  canary_violations: CanaryViolationsTable;
  canary_state: CanaryStateTable;
  canary_alerts: CanaryAlertsTable;
}

export type AgentRow = Selectable<AgentsTable>;
export type PoolRow = Selectable<PoolsTable>;
export type ExecutionRow = Selectable<ExecutionsTable>;
export type NewExecution = Insertable<ExecutionsTable>;
export type ExecutionUpdate = Updateable<ExecutionsTable>;
export type ExecutionEventRow = Selectable<ExecutionEventsTable>;
export type ApiKeyRow = Selectable<ApiKeysTable>;
export type AuditRow = Selectable<AuditLogTable>;
export type ExecutionLogRow = Selectable<ExecutionLogsTable>;
export type ScheduleRow = Selectable<SchedulesTable>;
export type WebhookRow = Selectable<WebhooksTable>;
export type IdempotencyKeyRow = Selectable<IdempotencyKeysTable>;
export type SubscriptionRow = Selectable<SubscriptionsTable>;
export type ChainLinkRow = Selectable<ChainLinksTable>;
export type ExecutionGroupRow = Selectable<ExecutionGroupsTable>;
export type FlowKeyRow = Selectable<FlowKeysTable>;
