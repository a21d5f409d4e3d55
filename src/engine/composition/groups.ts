import { sql, type Kysely } from 'kysely';
import type { AlertSinkKind } from '../../domain/canary.ts';
import type { CancelReason } from '../../domain/error-codes.ts';
import { decideGroup, GROUP_LIMITS, type GroupPolicy, type JoinRefusal } from '../../domain/groups.ts';
import { newExecutionId } from '../../domain/ids.ts';
import { MESSAGE_MAX_CHARS } from '../../domain/limits.ts';
import { JsonSplice } from '../../domain/json-splice.ts';
import { renderWithin, type TemplateShape } from '../../domain/templates.ts';
import type { StoreAdapter, Tx } from '../../store/adapter.ts';
import type { AgentRow, DB, ExecutionGroupRow, ExecutionRow } from '../../store/schema.ts';
import { PREVIEW_CHARS } from '../../domain/lists.ts';
import { lockAgentsForNewWork } from '../agent-lock.ts';
import { appendAudit } from '../audit.ts';
import { statusIs } from '../status-sql.ts';
import { cancelExecution, cancelQueued } from '../transitions/cancel.ts';
import { createExecutions, queuedValues, type NewQueued } from '../transitions/create.ts';
import type { FollowContext } from './context.ts';
import { queueAlerts } from '../alerts.ts';

/** The join spec stored on the group (execution_groups.join_spec). */
export interface JoinSpec {
  agent: string;
  /** Template over JOIN_TEMPLATE_SHAPE (src/domain/templates.ts). */
  message: string;
  priority?: number;
}

/** What a join's message template may name: the group and its members (in index order). */
export const JOIN_TEMPLATE_SHAPE: TemplateShape = {
  group: { id: 'leaf', policy: 'leaf', status: 'leaf', size: 'leaf', succeeded: 'leaf', failed: 'leaf' },
  members: { '*': { index: 'leaf', agent: 'leaf', execution_id: 'leaf', status: 'leaf', result: 'any', error: 'any' } },
};

/** The `invariant` column of a join-refused alert (it names what alerted, as BREAKER_ALERT does). */
export const GROUP_JOIN_ALERT = 'group.join_refused';

/** One member in a join's payload and a group's view: the latest run of its retry chain. */
export interface MemberOutcome {
  index: number;
  agent: string;
  execution_id: string;
  status: ExecutionRow['status'];
  attempt: number;
  retry_number: number;
  /** Its result, parsed when first read (a join's payload splices `result_text` instead). */
  readonly result: unknown;
  /** Its result's JSON text: null when it has none, or it was not read (over the budget, or not asked for). */
  result_text: string | null;
  /** Its result was over the join's budget (GROUP_LIMITS.joinResultsMaxChars): read it by execution id. */
  result_omitted?: true;
  /** The first PREVIEW_CHARS + 1 characters of its result's JSON text (for previews), or null. */
  result_head: string | null;
  error: { code: string | null; message: string | null } | null;
}

/** A queued row for a group (a member or the join), from its agent's settings. */
export function groupRow(
  agent: AgentRow,
  spec: { message: string; payload?: unknown; payloadJson?: string; priority?: number; idempotency_key?: string | null },
  group: { id: string; index: number | null },
  origin: Record<string, unknown>,
): NewQueued {
  return {
    id: newExecutionId(),
    agent: agent.name,
    trigger_kind: 'group',
    origin: JSON.stringify(origin),
    message: spec.message,
    payload: spec.payloadJson ?? JSON.stringify(spec.payload ?? null),
    priority: spec.priority ?? 0,
    run_after: null,
    max_redeliveries: agent.max_redeliveries,
    timeout_seconds: agent.timeout_seconds,
    lease_ttl_seconds: agent.lease_ttl_seconds,
    idempotency_key: spec.idempotency_key ?? null,
    retry_policy: agent.retry_policy,
    group_id: group.id,
    group_index: group.index,
  };
}

/**
 * A group member reached its final state: count it on the group, decide the group, create its
 * join. Runs inside the transaction that ended the member (followFinals).
 *
 * The count is one UPDATE of the group row: on PostgreSQL it takes the row lock, so members
 * ending at once in several processes count one after another and each sees the counts with
 * its own included. The decision is a compare-and-set from 'running', so it happens once, and
 * the join is created with it or not at all. A member ending after the decision is still
 * counted (progress stays true) but decides nothing.
 */
export async function memberFinal(
  tx: Tx,
  ctx: FollowContext,
  row: ExecutionRow,
): Promise<{ created: ExecutionRow[]; ended: ExecutionRow[] }> {
  const none = { created: [], ended: [] };
  if (row.group_id === null || row.group_index === null) return none; // not a member (or the join)
  const ok = row.status === 'succeeded' ? 1 : 0;
  const bad = row.status === 'failed' ? 1 : 0;
  const group = await tx
    .updateTable('execution_groups')
    .set((eb) => ({
      finished: eb('finished', '+', 1),
      succeeded: eb('succeeded', '+', ok),
      failed: eb('failed', '+', bad),
    }))
    .where('id', '=', row.group_id)
    .returningAll()
    .executeTakeFirst();
  if (!group || group.status !== 'running') return none;
  const status = decideGroup(group.policy, group.quorum === null ? null : Number(group.quorum), {
    size: Number(group.size),
    finished: Number(group.finished),
    succeeded: Number(group.succeeded),
  });
  if (!status) return none;
  const decided = await tx
    .updateTable('execution_groups')
    .set({ status, decided_at: ctx.now })
    .where('id', '=', group.id)
    .where('status', '=', 'running')
    .returningAll()
    .executeTakeFirst();
  if (!decided) return none;
  await appendAudit(tx, {
    at: ctx.now,
    actor: ctx.actor,
    action: 'group.decide',
    subject: group.id,
    execution_id: row.id,
    detail: { status, finished: Number(group.finished), succeeded: Number(group.succeeded), failed: Number(group.failed) },
  });
  // Decided before every member ended (a first failure, a first success, a quorum): the rest stop.
  const ended = await cancelLiveMembers(tx, ctx.store, group.id, ctx.now, ctx.actor, 'group_decided');
  const join = await startJoin(tx, ctx, decided);
  return { created: join ? [join] : [], ended };
}

/**
 * Stop a group's members that have not ended: queued → cancelled now (returned: follow them),
 * running → cancellation requested (they end when their worker stops). Their rows are locked
 * first; a member that ended meanwhile is no longer live and is left alone.
 */
export async function cancelLiveMembers(
  tx: Tx,
  store: StoreAdapter,
  groupId: string,
  now: number,
  actor: string,
  reason: CancelReason,
): Promise<ExecutionRow[]> {
  const live = await store
    .lockRows(
      tx
        .selectFrom('executions')
        .selectAll()
        .where('group_id', '=', groupId)
        .where('group_index', 'is not', null)
        .where((eb) => eb.or([eb('status', '=', statusIs('queued')), eb('status', '=', statusIs('running'))]))
        .orderBy('group_index'),
      'wait',
    )
    .execute();
  const cancelled = await cancelQueued(
    tx,
    live.filter((r) => r.status === 'queued'),
    now,
    actor,
    reason,
  );
  for (const r of live) if (r.status === 'running') await cancelExecution(tx, store, r.id, now, actor, reason);
  return cancelled;
}

/**
 * Each member's latest run (the last of its retry chain), in index order, with results while
 * they fit the join's budget. Two seeks on executions_group: heads with result lengths, then
 * the results that fit (a result may be megabytes; the budget never reads the others).
 */
export async function readMemberOutcomes(db: Kysely<DB>, groupId: string, withResults: boolean): Promise<MemberOutcome[]> {
  const heads = await db
    .selectFrom('executions')
    .select(['id', 'agent', 'status', 'attempt', 'group_index', 'retry_number', 'error_code', 'error_message'])
    .select(sql<number | null>`length(${sql.ref('result')})`.as('result_chars'))
    .select(sql<string | null>`substr(${sql.ref('result')}, 1, ${sql.lit(PREVIEW_CHARS + 1)})`.as('result_head'))
    .where('group_id', '=', groupId)
    .where('group_index', 'is not', null)
    .orderBy('group_index')
    .orderBy('retry_number', 'desc')
    .execute();
  const latest: typeof heads = [];
  for (const h of heads) if (latest.length === 0 || latest[latest.length - 1]!.group_index !== h.group_index) latest.push(h);
  const take = new Set<string>();
  if (withResults) {
    let left = GROUP_LIMITS.joinResultsMaxChars;
    for (const h of latest) {
      const n = h.result_chars === null ? 0 : Number(h.result_chars);
      if (n > 0 && n <= left) {
        take.add(h.id);
        left -= n;
      }
    }
  }
  const results = new Map<string, string | null>();
  const ids = [...take];
  for (let i = 0; i < ids.length; i += 500) {
    const part = await db
      .selectFrom('executions')
      .select(['id', 'result'])
      .where('id', 'in', ids.slice(i, i + 500))
      .execute();
    for (const r of part) results.set(r.id, r.result);
  }
  return latest.map((h) => {
    const text = results.get(h.id) ?? null;
    const omitted = withResults && h.result_chars !== null && !take.has(h.id);
    let parsed: unknown;
    return {
      index: Number(h.group_index),
      agent: h.agent,
      execution_id: h.id,
      status: h.status,
      attempt: Number(h.attempt),
      retry_number: Number(h.retry_number),
      get result() {
        return (parsed ??= text === null ? null : JSON.parse(text));
      },
      result_text: text,
      ...(omitted ? { result_omitted: true as const } : {}),
      result_head: h.result_head,
      error: h.error_code === null && h.error_message === null ? null : { code: h.error_code, message: h.error_message },
    };
  });
}

/**
 * A member as a join sees it, in both its template's context and its payload: `result` is read
 * from `m` only when asked for (a template naming it), and given as `result` here.
 */
function joinMember(m: MemberOutcome, result: () => unknown) {
  return {
    index: m.index,
    agent: m.agent,
    execution_id: m.execution_id,
    status: m.status,
    get result() {
      return result();
    },
    ...(m.result_omitted ? { result_omitted: true as const } : {}),
    error: m.error,
  };
}

/**
 * The decided group's join, created once (the caller won the compare-and-set): through
 * createExecutions under the join agent's new-work turn, so its backlog counts. A full backlog, a
 * missing agent or a message over the limit leaves `join_refused` and an alert instead.
 */
async function startJoin(tx: Tx, ctx: FollowContext, group: ExecutionGroupRow): Promise<ExecutionRow | undefined> {
  const { store, now, actor, alertSinks: sinks } = ctx;
  if (group.join_spec === null) return undefined;
  const spec = JSON.parse(group.join_spec) as JoinSpec;
  const members = await readMemberOutcomes(tx, group.id, true);
  const summary = { id: group.id, policy: group.policy as GroupPolicy, status: group.status };
  // Results are parsed only where the message template reads them; the payload carries their
  // stored texts spliced in: a join over 4 MiB of results is not parsed and serialised again.
  const context = {
    group: { ...summary, size: Number(group.size), succeeded: Number(group.succeeded), failed: Number(group.failed) },
    members: members.map((m) => joinMember(m, () => m.result)),
  };
  const splice = new JsonSplice();
  const payloadMembers = members.map((m) => {
    const raw = m.result_text === null ? null : splice.raw(m.result_text);
    return joinMember(m, () => raw);
  });
  const [agent] = await lockAgentsForNewWork(tx, store, [spec.agent]);
  let refused: JoinRefusal | undefined;
  let join: ExecutionRow | undefined;
  const message = renderWithin(spec.message, context, MESSAGE_MAX_CHARS, true) as string | undefined;
  if (!agent || agent.name === ctx.deleting) refused = 'agent_missing';
  else if (message === undefined) refused = 'message_too_large';
  else {
    const values = groupRow(
      agent,
      { message, payloadJson: splice.stringify({ group: summary, members: payloadMembers }), priority: spec.priority },
      { id: group.id, index: null },
      { group: { id: group.id, role: 'join' } },
    );
    join = await createExecutions(tx, store, {
      backlog: 'check',
      agent,
      row: queuedValues(values, now, actor),
      audit: {
        each: (r) => ({
          at: now,
          actor,
          action: 'execution.create',
          subject: r.agent,
          execution_id: r.id,
          detail: { trigger: 'group', group_id: group.id, role: 'join' },
        }),
      },
    });
    if (!join) refused = 'backlog_full';
  }
  await tx
    .updateTable('execution_groups')
    .set(join ? { join_execution_id: join.id } : { join_refused: refused! })
    .where('id', '=', group.id)
    .execute();
  if (join) return join;
  await appendAudit(tx, {
    at: now,
    actor,
    action: 'group.join_refused',
    subject: group.id,
    detail: { agent: spec.agent, reason: refused },
  });
  // Through the canary's alert sinks (it delivers canary_alerts rows, with retries), queued in
  // this transaction: the refusal and its alert commit together.
  await queueAlerts(tx, sinks, {
    invariant: GROUP_JOIN_ALERT,
    transition: 'violated',
    now,
    body: (sink) => joinRefusedBody(sink, { group_id: group.id, agent: spec.agent, reason: refused!, at: now }),
  });
  return undefined;
}

/** The body one sink receives when a decided group could not start its join. */
export function joinRefusedBody(
  sink: AlertSinkKind,
  a: { group_id: string; agent: string; reason: JoinRefusal; at: number },
): Record<string, unknown> {
  if (sink === 'slack') {
    return { text: `:warning: Baton: group ${a.group_id} decided but its join on agent ${a.agent} was not started (${a.reason})` };
  }
  return { event: 'group.join_refused', group_id: a.group_id, agent: a.agent, reason: a.reason, at: new Date(a.at).toISOString() };
}
