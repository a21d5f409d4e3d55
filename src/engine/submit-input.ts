import { newExecutionId } from '../domain/ids.ts';
import type { RetryPolicy } from '../domain/retry.ts';
import type { TriggerKind } from '../domain/states.ts';
import type { AgentRow } from '../store/schema.ts';
import type { NewQueued, SubmitFields } from './transitions/create.ts';

/** What a submit asks for: the task and how to run it (the agent's contract fills in the rest). */
export interface SubmitInput {
  message: string;
  payload?: unknown;
  /** The payload already serialised (a route that measured its size): stored as given, in place of `payload`. */
  payloadJson?: string;
  priority?: number;
  run_after?: number | null;
  trigger?: TriggerKind;
  origin?: Record<string, unknown>;
  idempotency_key?: string | null;
  /** Overrides the agent's retry policy for this task. */
  retry?: RetryPolicy | null;
  /** Its concurrency key (src/domain/flow.ts); null or absent: none. */
  key?: string | null;
  /** With a key: fold into the key's queued, not yet due, debounced task, or start one due this many seconds from now. */
  debounce_seconds?: number | null;
  /** With a key: refuse (AlreadyRunning) while the key has a queued or running task. */
  singleton?: boolean;
}

/** A new row's own fields, before the agent's contract defaults (newRow adds them). */
export function submitFields(agent: string, input: SubmitInput): SubmitFields {
  return {
    id: newExecutionId(),
    agent,
    trigger_kind: input.trigger ?? 'api',
    origin: JSON.stringify(input.origin ?? {}),
    message: input.message,
    payload: input.payloadJson ?? JSON.stringify(input.payload ?? null),
    priority: input.priority ?? 0,
    run_after: input.run_after ?? null,
    idempotency_key: input.idempotency_key ?? null,
    retry_policy: input.retry ? JSON.stringify(input.retry) : null,
    // Only when given, so an unkeyed row keeps its insert statement's shape.
    ...(input.key ? { flow_key: input.key } : {}),
    ...(input.key && input.debounce_seconds ? { debounce_seconds: input.debounce_seconds } : {}),
  };
}

export function newRow(agent: AgentRow, input: SubmitInput): NewQueued {
  const f = submitFields(agent.name, input);
  return Object.assign(f, {
    max_redeliveries: agent.max_redeliveries,
    timeout_seconds: agent.timeout_seconds,
    lease_ttl_seconds: agent.lease_ttl_seconds,
    retry_policy: f.retry_policy ?? agent.retry_policy,
  });
}

/** The audit entry of a submit refused for a full backlog. */
export function refusal(at: number, actor: string, agent: string) {
  return { at, actor, action: 'execution.refused', subject: agent, detail: { error: 'backlog_full' } };
}
