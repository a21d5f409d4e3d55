import { CONTRACT_DEFAULTS } from '../../domain/defaults.ts';
import type { AlertSinkKind } from '../../domain/canary.ts';
import { CHAIN_ALERT, type ChainRefusal, type SubscriptionOn } from '../../domain/chains.ts';
import { newExecutionId } from '../../domain/ids.ts';
import { MESSAGE_MAX_CHARS } from '../../domain/limits.ts';
import { renderWithin, type RenderSizes } from '../../domain/templates.ts';
import type { Tx } from '../../store/adapter.ts';
import type { ExecutionRow, SubscriptionRow } from '../../store/schema.ts';
import { lockAgentsForNewWork, type HeldAgent } from '../agent-lock.ts';
import { appendAudit } from '../audit.ts';
import { createExecutions, queuedValues } from '../transitions/create.ts';
import { firstTrigger } from '../transitions/retry.ts';
import type { FollowContext } from './context.ts';
import { queueAlerts } from '../alerts.ts';
import { ENABLED } from '../status-sql.ts';

/** Final statuses a subscription's `on` matches; `any` is every one of them (skipped never chains). */
const ON_MATCHES: Record<SubscriptionOn, ReadonlySet<string>> = {
  succeeded: new Set(['succeeded']),
  failed: new Set(['failed']),
  cancelled: new Set(['cancelled']),
  any: new Set(['succeeded', 'failed', 'cancelled']),
};

/** Whether `sub` starts a task for the final outcome `row` (its status, schedule and first trigger kind). */
export function subscriptionMatches(sub: SubscriptionRow, row: ExecutionRow): boolean {
  if (!ON_MATCHES[sub.on_status].has(row.status)) return false;
  if (sub.schedule_id !== null && sub.schedule_id !== row.schedule_id) return false;
  if (sub.trigger_kind !== null && sub.trigger_kind !== firstTrigger(row)) return false;
  return true;
}

function parsed(text: string | null): unknown {
  if (text === null) return null;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** What a subscription's templates see: `{ source: {...} }` (docs/api.md, "Subscriptions"). */
export function sourceContext(row: ExecutionRow): Record<string, unknown> {
  return {
    source: {
      id: row.id,
      agent: row.agent,
      status: row.status,
      result: parsed(row.result),
      error: row.error_code === null && row.error_message === null ? null : { code: row.error_code, message: row.error_message },
      payload: parsed(row.payload),
      trigger: firstTrigger(row),
      schedule_id: row.schedule_id,
    },
  };
}

/** The payload a subscription without a payload template gives its task: the source in brief (its result if it fits). */
const SUMMARY = { source: { id: '{{source.id}}', agent: '{{source.agent}}', status: '{{source.status}}', error: '{{source.error}}' } };
const SUMMARY_WITH_RESULT = { source: { ...SUMMARY.source, result: '{{source.result}}' } };

/**
 * Renders tasks from one source's context: the message and payload JSON of a subscription, or
 * undefined when either is over the limits (src/domain/limits.ts, payloadLimitBytes). Made once per
 * source and used for each of its subscriptions, so the context's values are measured once and a
 * payload template shared by several (the summary, most often) is rendered once: a large result
 * serialised once per subscription would hold SQLite's event loop for each of them.
 */
function taskRenderer(context: Record<string, unknown>): (sub: SubscriptionRow) => { message: string; payload: string } | undefined {
  const sizes: RenderSizes = new Map();
  const payloads = new Map<string | null, string | undefined>();
  const limit = CONTRACT_DEFAULTS.payloadLimitBytes;
  const fits = (template: unknown): string | undefined => {
    const v = renderWithin(template, context, limit, false, sizes);
    if (v === undefined) return undefined;
    const text = JSON.stringify(v);
    return Buffer.byteLength(text) <= limit ? text : undefined;
  };
  return (sub) => {
    const message = renderWithin(sub.message, context, MESSAGE_MAX_CHARS, true, sizes) as string | undefined;
    if (message === undefined || message.length > MESSAGE_MAX_CHARS) return undefined;
    if (!payloads.has(sub.payload))
      payloads.set(sub.payload, sub.payload === null ? (fits(SUMMARY_WITH_RESULT) ?? fits(SUMMARY)) : fits(JSON.parse(sub.payload)));
    const payload = payloads.get(sub.payload);
    return payload === undefined ? undefined : { message, payload };
  };
}

/**
 * The tasks `row`'s final outcome starts through the enabled subscriptions on its agent, in
 * the transaction that ended it. Each matching subscription gets one
 * chain_links row — what it started, or why nothing — whose primary key (source, subscription)
 * makes the link exactly-once: the task is created only when the link row is new, so following
 * the same outcome twice creates nothing more. A refusal (depth limit, full backlog, missing
 * target, oversized rendering) is recorded there and never fails the source.
 */
export async function startChained(tx: Tx, ctx: FollowContext, row: ExecutionRow): Promise<ExecutionRow[]> {
  if (ctx.unsubscribed?.has(row.agent)) return [];
  const subs = (
    await tx
      .selectFrom('subscriptions')
      .selectAll()
      .where('source_agent', '=', row.agent)
      .where('enabled', '=', ENABLED)
      .orderBy('id')
      .execute()
  ).filter((s) => subscriptionMatches(s, row));
  if (subs.length === 0) return [];
  const depth = row.chain_depth + 1;
  const deep = depth > ctx.chainDepthLimit;
  // Every target at once, in name order (lockAgentsForNewWork sorts): backlog reads are exact.
  const agents = new Map<string, HeldAgent>();
  if (!deep) {
    for (const a of await lockAgentsForNewWork(
      tx,
      ctx.store,
      subs.map((s) => s.target_agent),
    ))
      agents.set(a.name, a);
  }
  const renderTask = taskRenderer(sourceContext(row));
  const created: ExecutionRow[] = [];
  for (const sub of subs) {
    const id = newExecutionId();
    const link = await tx
      .insertInto('chain_links')
      .values({
        source_id: row.id,
        subscription_id: sub.id,
        execution_id: deep ? null : id,
        refused: deep ? 'depth_limit' : null,
        at: ctx.now,
      })
      .onConflict((oc) => oc.columns(['source_id', 'subscription_id']).doNothing())
      .returning('source_id')
      .executeTakeFirst();
    if (!link) continue; // followed before: its link says what it did
    const refuse = (reason: ChainRefusal) => recordRefusal(tx, ctx, row, sub, reason, depth);
    if (deep) {
      await refuse('depth_limit');
      continue;
    }
    const agent = agents.get(sub.target_agent);
    if (!agent) {
      await refuse('agent_missing');
      continue;
    }
    const rendered = renderTask(sub);
    if (!rendered) {
      await refuse('template_too_large');
      continue;
    }
    const task = await createExecutions(tx, ctx.store, {
      backlog: 'check',
      agent,
      row: queuedValues(
        {
          id,
          agent: agent.name,
          trigger_kind: 'chain',
          origin: JSON.stringify({
            chain: {
              source_id: row.id,
              subscription_id: sub.id,
              on: sub.on_status,
              filter: filterOf(sub),
              source_status: row.status,
              source_agent: row.agent,
            },
          }),
          message: rendered.message,
          payload: rendered.payload,
          priority: 0,
          run_after: null,
          max_redeliveries: agent.max_redeliveries,
          timeout_seconds: agent.timeout_seconds,
          lease_ttl_seconds: agent.lease_ttl_seconds,
          idempotency_key: null,
          retry_policy: agent.retry_policy,
          caused_by: row.id,
          subscription_id: sub.id,
          chain_depth: depth,
        },
        ctx.now,
        ctx.actor,
      ),
      audit: {
        each: (t) => ({
          at: ctx.now,
          actor: ctx.actor,
          action: 'execution.create',
          subject: agent.name,
          execution_id: t.id,
          detail: { trigger: 'chain', caused_by: row.id, subscription_id: sub.id },
        }),
      },
    });
    if (!task) {
      await refuse('backlog_full');
      await queueAlerts(tx, ctx.alertSinks, {
        invariant: CHAIN_ALERT,
        transition: 'violated',
        now: ctx.now,
        body: (sink) => chainAlertBody(sink, row, sub, ctx.now),
      });
      continue;
    }
    created.push(task);
  }
  return created;
}

function filterOf(sub: SubscriptionRow): { schedule_id?: string; trigger?: string } {
  return {
    ...(sub.schedule_id === null ? {} : { schedule_id: sub.schedule_id }),
    ...(sub.trigger_kind === null ? {} : { trigger: sub.trigger_kind }),
  };
}

/** The link row says why (depth_limit rows are inserted refused), and the audit log keeps it after retention. */
async function recordRefusal(
  tx: Tx,
  ctx: FollowContext,
  row: ExecutionRow,
  sub: SubscriptionRow,
  reason: ChainRefusal,
  depth: number,
): Promise<void> {
  if (reason !== 'depth_limit') {
    await tx
      .updateTable('chain_links')
      .set({ execution_id: null, refused: reason })
      .where('source_id', '=', row.id)
      .where('subscription_id', '=', sub.id)
      .execute();
  }
  await appendAudit(tx, {
    at: ctx.now,
    actor: ctx.actor,
    action: 'execution.refused',
    subject: sub.target_agent,
    execution_id: row.id,
    detail: { error: reason, trigger: 'chain', caused_by: row.id, subscription_id: sub.id, chain_depth: depth },
  });
}

/** The body one sink receives: which subscription could not start its task, and why. */
export function chainAlertBody(sink: AlertSinkKind, row: ExecutionRow, sub: SubscriptionRow, at: number): Record<string, unknown> {
  if (sink === 'slack') {
    return {
      text: `:warning: Baton: subscription ${sub.id} could not start a task on agent ${sub.target_agent} after execution ${row.id} of ${row.agent} ended ${row.status}: backlog full`,
    };
  }
  return {
    event: 'chain.refused',
    refused: 'backlog_full',
    subscription_id: sub.id,
    source_id: row.id,
    source_agent: row.agent,
    source_status: row.status,
    target_agent: sub.target_agent,
    at: new Date(at).toISOString(),
  };
}
