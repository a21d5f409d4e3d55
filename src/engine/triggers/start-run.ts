import { lockAgentsForNewWork, type HeldAgent } from '../agent-lock.ts';
import { newExecutionId } from '../../domain/ids.ts';
import type { OverlapPolicy } from '../../domain/policies.ts';
import type { TriggerKind } from '../../domain/states.ts';
import type { StoreAdapter, Tx } from '../../store/adapter.ts';
import type { AgentRow, ExecutionRow, NewExecution } from '../../store/schema.ts';
import { LIVE_STATUSES } from '../status-sql.ts';
import { createExecutions, queuedValues, type CreateAudit, type NewQueued } from '../transitions/create.ts';

export type { OverlapPolicy };

/** Everything a trigger (tick, manual, webhook) knows about the run it wants to start. */
export interface RunSpec {
  scheduleId: string | null;
  /** The due time a schedule tick fires for (one row per due time); null for other triggers. */
  scheduledFor: number | null;
  webhookId: string | null;
  /** `skip`: refuse while a run of the same schedule (or, without one, webhook) is not terminal. */
  overlap: OverlapPolicy;
  trigger: TriggerKind;
  origin: Record<string, unknown>;
  message: string;
  /** JSON text. */
  payload: string;
  priority: number;
  /** JSON text of the effective retry policy, or null. */
  retryPolicy: string | null;
  idempotencyKey: string | null;
}

export type RunOutcome =
  { kind: 'created'; row: ExecutionRow } | { kind: 'busy'; execution_id: string } | { kind: 'full'; max_backlog: number };

/** Hold the agent for the rest of the transaction: it serialises backlog and overlap checks. */
export async function lockAgent(tx: Tx, store: StoreAdapter, name: string): Promise<HeldAgent | undefined> {
  return (await lockAgentsForNewWork(tx, store, [name]))[0];
}

/** The run in flight that a `skip` overlap policy defers to (running first), if any. */
export async function runInFlight(tx: Tx, spec: Pick<RunSpec, 'scheduleId' | 'webhookId'>): Promise<string | undefined> {
  let q = tx.selectFrom('executions').select('id').where('status', 'in', LIVE_STATUSES);
  if (spec.scheduleId) q = q.where('schedule_id', '=', spec.scheduleId);
  else if (spec.webhookId) q = q.where('webhook_id', '=', spec.webhookId);
  else return undefined;
  const row = await q.orderBy('status', 'desc').orderBy('created_at').limit(1).executeTakeFirst();
  return row?.id;
}

export function rowFor(agent: AgentRow, spec: RunSpec): NewQueued {
  return {
    id: newExecutionId(),
    agent: agent.name,
    schedule_id: spec.scheduleId,
    scheduled_for: spec.scheduledFor,
    webhook_id: spec.webhookId,
    trigger_kind: spec.trigger,
    origin: JSON.stringify(spec.origin),
    message: spec.message,
    payload: spec.payload,
    priority: spec.priority,
    run_after: null,
    max_redeliveries: agent.max_redeliveries,
    timeout_seconds: agent.timeout_seconds,
    lease_ttl_seconds: agent.lease_ttl_seconds,
    idempotency_key: spec.idempotencyKey,
    retry_policy: spec.retryPolicy ?? agent.retry_policy,
    serial_key: spec.overlap === 'queue' ? (spec.scheduleId ?? spec.webhookId) : null,
  };
}

/**
 * Start one run on a locked agent: refuse under the overlap policy, refuse a full backlog, or
 * create the queued row with its audit entry. Nothing is written on a refusal (the caller audits
 * it). The overlap check reads under the same new-work turn as the backlog read, so both hold
 * until the commit.
 */
export async function startRun(
  tx: Tx,
  store: StoreAdapter,
  agent: HeldAgent,
  spec: RunSpec,
  now: number,
  actor: string,
  audit: CreateAudit<NewExecution>,
): Promise<RunOutcome> {
  if (spec.overlap === 'skip') {
    const busy = await runInFlight(tx, spec);
    if (busy) return { kind: 'busy', execution_id: busy };
  }
  const row = await createExecutions(tx, store, { backlog: 'check', agent, row: queuedValues(rowFor(agent, spec), now, actor), audit });
  if (!row) return { kind: 'full', max_backlog: agent.max_backlog };
  return { kind: 'created', row };
}
