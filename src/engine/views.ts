import { parsePools } from '../domain/pools.ts';
import { parseThrottle } from '../domain/throttle.ts';
import type { AgentRow, ExecutionEventRow, ExecutionRow } from '../store/schema.ts';
import { PREVIEW_CHARS, type ExecutionListRow } from './list-executions.ts';
import { executionTrace } from '../domain/trace.ts';
import { parseBudget } from '../domain/budget.ts';
import { parseBreakerConfig } from '../domain/breaker.ts';
import type { HoldView } from '../domain/admission.ts';
import { isoTime } from '../domain/iso-time.ts';

/** Row → API shape. Timestamps become ISO-8601 UTC strings; JSON columns are parsed. */
export const iso = (ms: number | null | undefined) => (ms === null || ms === undefined ? null : isoTime(Number(ms)));
const json = (text: string | null) => (text === null ? null : JSON.parse(text));

/** The columns a full execution and a list item show alike. */
type ExecutionFields = Pick<
  ExecutionRow,
  | 'id'
  | 'agent'
  | 'status'
  | 'attempt'
  | 'trigger_kind'
  | 'origin'
  | 'priority'
  | 'schedule_id'
  | 'scheduled_for'
  | 'run_after'
  | 'created_at'
  | 'queued_at'
  | 'started_at'
  | 'completed_at'
  | 'duration_ms'
  | 'lease_owner'
  | 'lease_expires_at'
  | 'heartbeat_at'
  | 'deadline_at'
  | 'cancel_requested_at'
  | 'usage'
  | 'retry_of'
  | 'retry_number'
  | 'idempotency_key'
  | 'caused_by'
  | 'subscription_id'
  | 'chain_depth'
  | 'group_id'
  | 'group_index'
  | 'flow_key'
>;

function executionFields(r: ExecutionFields) {
  return {
    id: r.id,
    agent: r.agent,
    status: r.status,
    attempt: r.attempt,
    trigger: r.trigger_kind,
    origin: json(r.origin),
    priority: r.priority,
    schedule_id: r.schedule_id,
    scheduled_for: iso(r.scheduled_for),
    run_after: iso(r.run_after),
    created_at: iso(r.created_at)!,
    queued_at: iso(r.queued_at),
    started_at: iso(r.started_at),
    completed_at: iso(r.completed_at),
    duration_ms: r.duration_ms === null ? null : Number(r.duration_ms),
    lease_owner: r.lease_owner,
    lease_expires_at: iso(r.lease_expires_at),
    heartbeat_at: iso(r.heartbeat_at),
    deadline_at: iso(r.deadline_at),
    cancel_requested_at: iso(r.cancel_requested_at),
    usage: json(r.usage),
    retry_of: r.retry_of,
    retry_number: r.retry_number,
    idempotency_key: r.idempotency_key,
    caused_by: r.caused_by,
    subscription_id: r.subscription_id,
    chain_depth: Number(r.chain_depth),
    group_id: r.group_id,
    group_index: r.group_index === null ? null : Number(r.group_index),
    key: r.flow_key,
  };
}

/**
 * A whole execution: bodies (message, payload, result, error) in full; `place` makes the payload's
 * and the result's values of their stored texts (parsed, unless the caller places them itself:
 * src/api/raw-json.ts).
 */
export function executionView(r: ExecutionRow, place: typeof json = json) {
  // Object.assign rather than a spread into a literal: this runs for every claim and completion.
  return Object.assign(executionFields(r), {
    message: r.message,
    payload: place(r.payload),
    result: place(r.result),
    error: r.error_code === null && r.error_message === null ? null : { code: r.error_code, message: r.error_message },
    traceparent: executionTrace(r.id).traceparent,
  });
}
export type ExecutionView = ReturnType<typeof executionView>;

/**
 * At most PREVIEW_CHARS characters (code points, as the database counts them in substr) of a
 * head read by list-executions.ts, ending in '…' when the text was longer.
 */
export function preview(text: string | null): string | null {
  if (text === null) return null;
  if (text.length <= PREVIEW_CHARS) return text; // UTF-16 units ≥ code points: short enough
  const chars = Array.from(text);
  return chars.length <= PREVIEW_CHARS ? text : chars.slice(0, PREVIEW_CHARS).join('') + '…';
}

/**
 * A list item: the execution without its bodies. `message` and `error.message` are previews;
 * `payload_preview` and `result_preview` are previews of the JSON text. The full execution
 * comes from GET /v1/executions/{id}.
 */
export function executionListView(r: ExecutionListRow) {
  return Object.assign(executionFields(r), {
    message: preview(r.message_head)!,
    payload_preview: preview(r.payload_head),
    result_preview: preview(r.result_head),
    error: r.error_code === null && r.error_head === null ? null : { code: r.error_code, message: preview(r.error_head) },
  });
}
export type ExecutionListView = ReturnType<typeof executionListView>;

export function eventView(e: ExecutionEventRow) {
  return {
    id: Number(e.id),
    from: e.from_status,
    to: e.to_status,
    at: iso(e.at)!,
    actor: e.actor,
    reason: e.reason,
    attempt: e.attempt,
  };
}

/** What a worker receives with a claim: the task and its lease. */
export function taskView(r: ExecutionRow, place: typeof json = json) {
  return {
    execution_id: r.id,
    agent: r.agent,
    attempt: r.attempt,
    message: r.message,
    payload: place(r.payload),
    lease_token: r.lease_token!,
    lease_expires_at: iso(r.lease_expires_at)!,
    lease_ttl_seconds: r.lease_ttl_seconds,
    deadline_at: iso(r.deadline_at)!,
    traceparent: executionTrace(r.id).traceparent,
  };
}
export type TaskView = ReturnType<typeof taskView>;

export function agentView(a: AgentRow, counts: { running: number; queued: number; hold: HoldView | null }) {
  return {
    name: a.name,
    description: a.description,
    max_parallel: a.max_parallel,
    max_backlog: a.max_backlog,
    timeout_seconds: a.timeout_seconds,
    lease_ttl_seconds: a.lease_ttl_seconds,
    max_redeliveries: a.max_redeliveries,
    delivery: a.delivery,
    push_url: a.push_url,
    push_signed: a.push_secret !== null,
    retry_policy: json(a.retry_policy),
    running: counts.running,
    queued: counts.queued,
    paused: a.paused_at === null ? null : { by: a.paused_by ?? 'unknown', reason: a.paused_reason ?? '', since: iso(a.paused_at)! },
    lapse_hold: a.lapse_hold_at === null ? null : { since: iso(a.lapse_hold_at)!, lapsed: Number(a.lapse_hold_count ?? 0) },
    budget: parseBudget(a.budget),
    breaker: breakerView(a),
    hold: counts.hold,
    pools: parsePools(a.pools),
    throttle: parseThrottle(a.throttle),
    last_claim_at: iso(a.last_claim_at),
    keys: {
      key_max_parallel: a.key_max_parallel,
      key_overrides: json(a.key_overrides) as Record<string, number> | null,
      key_throttle: parseThrottle(a.key_throttle),
    },
    created_at: iso(a.created_at)!,
    updated_at: iso(a.updated_at)!,
  };
}
export type AgentView = ReturnType<typeof agentView>;

/** The agent's circuit breaker as stored (null: off). An `open` one whose `until` passed takes a probe at the next claim. */
export function breakerView(a: AgentRow) {
  const config = parseBreakerConfig(a.breaker_config);
  if (!config) return null;
  return {
    config,
    state: a.breaker_state,
    consecutive_failures: Number(a.breaker_consecutive),
    // The ratio reads failures out of the whole window: outcomes it has not seen count as successes.
    recent: { outcomes: config.window, failures: a.breaker_recent.split('').filter((c) => c === '1').length },
    opened_at: iso(a.breaker_opened_at),
    until: iso(a.breaker_until),
    probe_execution_id: a.breaker_probe_id,
    cooldown_ms: a.breaker_cooldown_ms === null ? null : Number(a.breaker_cooldown_ms),
  };
}
