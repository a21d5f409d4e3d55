import { backoffMs, isRetriable, parsePolicy } from '../../domain/retry.ts';
import { newExecutionId } from '../../domain/ids.ts';
import type { StoreAdapter, Tx } from '../../store/adapter.ts';
import type { ExecutionRow, NewExecution } from '../../store/schema.ts';
import { createExecutions } from './create.ts';
import { stamp } from './stamp.ts';

/**
 * failed → a new queued execution with `retry_of` set, when the failed row's retry policy has
 * attempts left. Call it in the transaction that wrote the failure, so a crash can lose neither
 * (the failure and its retry commit together). Retries are not refused for a full backlog: they
 * replace work that was already counted. Returns the new row, or undefined when none is due.
 */
export async function insertRetry(
  tx: Tx,
  store: StoreAdapter,
  failed: ExecutionRow,
  now: number,
  actor: string,
): Promise<ExecutionRow | undefined> {
  if (failed.status !== 'failed' || !isRetriable(failed.error_code)) return undefined;
  const policy = parsePolicy(failed.retry_policy);
  if (!policy || failed.retry_number + 1 >= policy.max_attempts) return undefined;
  const number = failed.retry_number + 1;
  const root = failed.retry_root ?? failed.id;
  const values: NewExecution = {
    id: newExecutionId(),
    agent: failed.agent,
    schedule_id: failed.schedule_id,
    scheduled_for: null,
    trigger_kind: 'retry' as const,
    origin: JSON.stringify({ retry_of: failed.id, retry_root: root, first_trigger: firstTrigger(failed) }),
    message: failed.message,
    payload: failed.payload,
    priority: failed.priority,
    run_after: now + backoffMs(policy, number),
    status: 'queued' as const,
    attempt: 0,
    max_redeliveries: failed.max_redeliveries,
    timeout_seconds: failed.timeout_seconds,
    lease_ttl_seconds: failed.lease_ttl_seconds,
    created_at: now,
    queued_at: now,
    retry_of: failed.id,
    retry_policy: failed.retry_policy,
    retry_number: number,
    retry_root: root,
    webhook_id: failed.webhook_id,
    serial_key: failed.serial_key,
    flow_key: failed.flow_key,
    idempotency_key: null,
    // A retry stands in for the run it repeats: same place in a chain, same member of a group
    // (the member's final outcome is its last retry's).
    chain_depth: failed.chain_depth,
    group_id: failed.group_id,
    group_index: failed.group_index,
    ...stamp(now, actor, 'retry'),
  };
  return createExecutions(tx, store, {
    backlog: 'exempt',
    row: values,
    audit: {
      each: (row) => ({
        at: now,
        actor,
        action: 'execution.retry',
        subject: row.agent,
        execution_id: row.id,
        detail: { trigger: 'retry', retry_of: failed.id, retry_number: number },
      }),
    },
  });
}

/** The trigger kind of the run a retry chain started with (a retry's own kind is 'retry'). */
export function firstTrigger(row: ExecutionRow): string {
  if (row.trigger_kind !== 'retry') return row.trigger_kind;
  try {
    return (JSON.parse(row.origin) as { first_trigger?: string }).first_trigger ?? 'retry';
  } catch {
    return 'retry';
  }
}
