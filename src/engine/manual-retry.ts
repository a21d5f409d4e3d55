import { AlreadyExists, BacklogFull, InvalidTransition, NotFound } from '../domain/errors.ts';
import { newExecutionId } from '../domain/ids.ts';
import type { StoreAdapter, Tx } from '../store/adapter.ts';
import type { ExecutionRow } from '../store/schema.ts';
import { lockAgentsForNewWork } from './agent-lock.ts';
import { createExecutions, queuedValues } from './transitions/create.ts';

/**
 * Retry a failed execution by hand (the dashboard's "retry selected"): a new queued execution
 * with the same agent, message and payload, `trigger: retry` and `retry_of` pointing at the
 * failed one, so the retry chain shows both. It runs under the agent's new-work lock, like a
 * submit, so the backlog read is exact and two retries of one execution cannot both pass the
 * "already retried" check: a failed execution is retried at most once (by hand or by its retry
 * policy); retry the newest member of the chain to go again. The agent's settings of today
 * apply (timeout, lease, re-deliveries); the failed run's retry policy goes with it.
 *
 * Refuses with NotFound, InvalidTransition (not failed), AlreadyExists (retried already: the
 * details name the retry) or BacklogFull.
 */
export async function retryFailedExecution(tx: Tx, store: StoreAdapter, id: string, now: number, actor: string): Promise<ExecutionRow> {
  const failed = await tx.selectFrom('executions').selectAll().where('id', '=', id).executeTakeFirst();
  if (!failed) throw new NotFound('execution', id);
  if (failed.status !== 'failed') throw new InvalidTransition(id, failed.status, 'retry (only a failed execution can be retried)');
  const [agent] = await lockAgentsForNewWork(tx, store, [failed.agent]);
  if (!agent) throw new NotFound('agent', failed.agent);
  const earlier = await tx.selectFrom('executions').select('id').where('retry_of', '=', id).executeTakeFirst();
  if (earlier) {
    const err = new AlreadyExists(`retry of execution '${id}'`, earlier.id);
    Object.assign(err.details, { execution_id: earlier.id });
    throw err;
  }
  const root = failed.retry_root ?? failed.id;
  const row = await createExecutions(tx, store, {
    backlog: 'check',
    agent,
    row: queuedValues(
      {
        id: newExecutionId(),
        agent: agent.name,
        schedule_id: failed.schedule_id,
        trigger_kind: 'retry',
        origin: JSON.stringify({ retry_of: failed.id, retry_root: root, by: actor }),
        message: failed.message,
        payload: failed.payload,
        priority: failed.priority,
        run_after: null,
        max_redeliveries: agent.max_redeliveries,
        timeout_seconds: agent.timeout_seconds,
        lease_ttl_seconds: agent.lease_ttl_seconds,
        idempotency_key: null,
        retry_policy: failed.retry_policy,
        retry_of: failed.id,
        retry_number: failed.retry_number + 1,
        retry_root: root,
        webhook_id: failed.webhook_id,
        serial_key: failed.serial_key,
        flow_key: failed.flow_key,
      },
      now,
      actor,
    ),
    audit: {
      each: (r) => ({
        at: now,
        actor,
        action: 'execution.retry',
        subject: r.agent,
        execution_id: r.id,
        detail: { trigger: 'retry', retry_of: failed.id, retry_number: r.retry_number, manual: true },
      }),
    },
  });
  if (!row) throw new BacklogFull(agent.name, agent.max_backlog);
  return row;
}
