import { BatonError, NotFound } from '../../domain/errors.ts';
import { GROUP_LIMITS, type GroupItemError, type GroupPolicy } from '../../domain/groups.ts';
import { newId } from '../../domain/ids.ts';
import { validateTemplate } from '../../domain/templates.ts';
import type { Tx } from '../../store/adapter.ts';
import type { AgentRow, ExecutionGroupRow, ExecutionRow, NewExecution } from '../../store/schema.ts';
import { lockAgentsForNewWork } from '../agent-lock.ts';
import { backlogs } from '../backlog.ts';
import { announce } from '../announce.ts';
import { appendAudit } from '../audit.ts';
import type { EngineContext } from '../context.ts';
import { IDEMPOTENCY, fingerprint } from '../triggers/idempotency.ts';
import { cancelExecution } from '../transitions/cancel.ts';
import { createExecutions, queuedValues } from '../transitions/create.ts';
import { iso, preview } from '../views.ts';
import { cancelLiveMembers, groupRow, JOIN_TEMPLATE_SHAPE, readMemberOutcomes, type JoinSpec } from './groups.ts';

/** One member to create: a task on `agent`. */
export interface MemberSpec {
  agent: string;
  message: string;
  payload?: unknown;
  /** The payload already serialised (the API measured its size): stored as given, in place of `payload`. */
  payloadJson?: string;
  priority?: number;
  /**
   * Claimed on the member's agent exactly like a submit's Idempotency-Key (scope `agent:<name>`,
   * same lifetime), and stored on the member execution: a key already used on that agent (by a
   * submit or another group) refuses the item with `duplicate_idempotency_key`.
   */
  idempotency_key?: string | null;
}

export interface GroupInput {
  members: MemberSpec[];
  /** Default `all`. */
  policy?: GroupPolicy;
  /** Successes that decide a `quorum` group (1..members); only with policy quorum. */
  quorum?: number | null;
  join?: JoinSpec | null;
  /** Kept on every member's origin (e.g. the API key id). */
  origin?: Record<string, unknown>;
  /** The caller's Idempotency-Key for the whole group, recorded on the group. */
  idempotency_key?: string | null;
}

/** Why one item of a refused group could not be created. `index` is the member's, or 'join'. */
export interface GroupItemRefusal {
  index: number | 'join';
  error: GroupItemError;
  message: string;
}

export type GroupView = Awaited<ReturnType<Groups['get']>>;
export type GroupCreatedView = GroupView & { paused_agents: string[] };

/** The view of a group just created, from what its transaction wrote (every member queued). */
function createdView(g: ExecutionGroupRow, rows: NewExecution[], paused: string[]): GroupCreatedView {
  const join = g.join_spec === null ? null : (JSON.parse(g.join_spec) as JoinSpec);
  return {
    ...groupSummary(g),
    members: rows.map((r, index) => ({
      index,
      agent: r.agent,
      execution_id: r.id as string,
      status: 'queued' as ExecutionRow['status'],
      attempt: 0,
      retry_number: 0,
      result_preview: null,
      error: null,
    })),
    join: join && { agent: join.agent, execution_id: null, status: null },
    paused_agents: paused,
  };
}

const groupSummary = (g: ExecutionGroupRow) => ({
  id: g.id,
  policy: g.policy,
  quorum: g.quorum === null ? null : Number(g.quorum),
  status: g.status,
  size: Number(g.size),
  progress: { finished: Number(g.finished), succeeded: Number(g.succeeded), failed: Number(g.failed) },
  join_refused: g.join_refused,
  created_at: iso(g.created_at)!,
  created_by: g.created_by,
  decided_at: iso(g.decided_at),
});

/**
 * Groups (fan-out with a join) as the engine's sub-service (`engine.groups`):
 * create all members and the group in one transaction or nothing, read, list, cancel. The
 * policy decision and the join happen in composition/groups.ts, in the transactions that end
 * members.
 */
export class Groups {
  constructor(private readonly engine: EngineContext) {}

  /**
   * Create the group and every member, or refuse the whole group (BatonError `group_refused`,
   * details.items: every failing item and why) having written nothing. Every member agent and the
   * join agent are locked for new work together (one sorted call), so backlog reads are exact.
   * Paused agents still queue, as a submit does (`paused_agents` says which).
   */
  async create(
    input: GroupInput,
    actor: string,
    opts: { onCreated?: (tx: Tx, created: GroupCreatedView) => Promise<void>; idempotencyTtlMs?: number } = {},
  ): Promise<GroupCreatedView> {
    const policy = input.policy ?? 'all';
    const size = input.members.length;
    if (size < 1 || size > GROUP_LIMITS.maxSize) {
      throw new BatonError('validation_error', `body.members: a group has 1 to ${GROUP_LIMITS.maxSize} members, not ${size}`);
    }
    const quorum = input.quorum ?? null;
    if (policy === 'quorum' && (quorum === null || !Number.isInteger(quorum) || quorum < 1 || quorum > size)) {
      throw new BatonError('validation_error', `body.quorum: policy quorum needs an integer from 1 to ${size} (the number of members)`);
    }
    if (policy !== 'quorum' && quorum !== null) throw new BatonError('validation_error', 'body.quorum: only with policy quorum');
    if (input.join) validateTemplate(input.join.message, JOIN_TEMPLATE_SHAPE, 'body.join.message', { members: size });
    const now = this.engine.now();
    const id = newId('gr_');
    const store = this.engine.store;
    const ttlMs = opts.idempotencyTtlMs ?? IDEMPOTENCY.ttlMs;
    const out = await store.transaction(async (tx) => {
      const names = input.members.map((m) => m.agent);
      const agents = new Map(
        (await lockAgentsForNewWork(tx, store, input.join ? [...names, input.join.agent] : names)).map((a) => [a.name, a]),
      );
      const refusals = await checkMembers(tx, input, names, agents, now);
      if (refusals.length > 0) refuse(refusals);
      const rows: NewExecution[] = input.members.map((m, index) =>
        queuedValues(
          groupRow(agents.get(m.agent)!, m, { id, index }, { ...input.origin, group: { id, role: 'member', index } }),
          now,
          actor,
        ),
      );
      // Member keys: claimed like a submit's Idempotency-Key on that agent (see MemberSpec).
      for (const [index, m] of input.members.entries()) {
        if (!m.idempotency_key) continue;
        const taken = await claimMemberKey(
          tx,
          m.agent,
          m.idempotency_key,
          { id, index, execution_id: rows[index]!.id as string },
          now,
          ttlMs,
        );
        if (taken) {
          refusals.push({
            index,
            error: 'duplicate_idempotency_key',
            message: `members[${index}].idempotency_key: '${m.idempotency_key}' was already used on agent '${m.agent}'`,
          });
        }
      }
      if (refusals.length > 0) refuse(refusals); // the keys claimed above roll back with the rest
      const group = await tx
        .insertInto('execution_groups')
        .values({
          id,
          policy,
          quorum,
          size,
          status: 'running',
          finished: 0,
          succeeded: 0,
          failed: 0,
          join_spec: input.join ? JSON.stringify(input.join) : null,
          join_execution_id: null,
          join_refused: null,
          idempotency_key: input.idempotency_key ?? null,
          created_at: now,
          created_by: actor,
          decided_at: null,
        })
        .returningAll()
        .executeTakeFirstOrThrow();
      await appendAudit(tx, {
        at: now,
        actor,
        action: 'group.create',
        subject: id,
        detail: { policy, quorum, size, join_agent: input.join?.agent ?? null },
      });
      // Room was counted above under the same hold; the join agent is held too (its join comes later).
      await createExecutions(tx, store, {
        backlog: 'counted',
        agents: [...agents.values()],
        rows,
        audit: {
          each: (r, index) => ({
            at: now,
            actor,
            action: 'execution.create',
            subject: r.agent,
            execution_id: r.id as string,
            detail: { trigger: 'group', group_id: id, index },
          }),
        },
      });
      const paused = [...new Set(names)].filter((n) => agents.get(n)!.paused_at !== null).sort();
      const created = createdView(group, rows, paused);
      await opts.onCreated?.(tx, created); // e.g. the idempotent answer, stored with the group
      return { created, rows };
    });
    announce(
      store,
      out.rows.map((r) => ({ id: r.id as string, agent: r.agent, status: 'queued' })),
    );
    return out.created;
  }

  /** The group with its members (each the latest run of its retry chain, in index order) and its join. */
  async get(id: string) {
    const db = this.engine.store.db;
    const group = await db.selectFrom('execution_groups').selectAll().where('id', '=', id).executeTakeFirst();
    if (!group) throw new NotFound('group', id);
    const members = await readMemberOutcomes(db, id, false);
    const join = group.join_spec === null ? null : (JSON.parse(group.join_spec) as JoinSpec);
    const joinRow =
      group.join_execution_id === null
        ? undefined
        : await db.selectFrom('executions').select(['id', 'status']).where('id', '=', group.join_execution_id).executeTakeFirst();
    return {
      ...groupSummary(group),
      members: members.map((m) => ({
        index: m.index,
        agent: m.agent,
        execution_id: m.execution_id,
        status: m.status,
        attempt: m.attempt,
        retry_number: m.retry_number,
        result_preview: preview(m.result_head),
        error: m.error,
      })),
      join: join && { agent: join.agent, execution_id: joinRow?.id ?? group.join_execution_id, status: joinRow?.status ?? null },
    };
  }

  /** A page of groups, newest first (execution_groups_recent), without their members. */
  async list(opts: { limit: number; before?: { created_at: number; id: string } }) {
    let q = this.engine.store.db.selectFrom('execution_groups').selectAll();
    if (opts.before) {
      const b = opts.before;
      q = q.where('created_at', '<=', b.created_at).where((eb) => eb.or([eb('created_at', '<', b.created_at), eb('id', '<', b.id)]));
    }
    const rows = await q.orderBy('created_at', 'desc').orderBy('id', 'desc').limit(opts.limit).execute();
    // The joins' statuses in one read by primary key: a page shows where each join stands, as `get` does.
    const joinIds = rows.flatMap((g) => (g.join_execution_id === null ? [] : [g.join_execution_id]));
    const statuses = new Map(
      joinIds.length === 0
        ? []
        : (await this.engine.store.db.selectFrom('executions').select(['id', 'status']).where('id', 'in', joinIds).execute()).map(
            (r) => [r.id, r.status] as const,
          ),
    );
    return rows.map((g) => ({
      ...groupSummary(g),
      join:
        g.join_spec === null
          ? null
          : {
              agent: (JSON.parse(g.join_spec) as JoinSpec).agent,
              execution_id: g.join_execution_id,
              status: (g.join_execution_id !== null && statuses.get(g.join_execution_id)) || null,
            },
      cursor: { created_at: Number(g.created_at), id: g.id },
    }));
  }

  /**
   * Cancel a group: running → cancelled (compare-and-set; its join will never be created,
   * `join_refused: cancelled`), and whatever the group's status, its members that have not
   * ended and its join are cancelled (queued at once, running on request). Idempotent; audited.
   */
  async cancel(id: string, actor: string): Promise<{ changed: boolean }> {
    const now = this.engine.now();
    const store = this.engine.store;
    const out = await store.transaction(async (tx) => {
      // Members first, then the group row: the order a member's completion takes them in.
      const ended = await cancelLiveMembers(tx, store, id, now, actor, 'group_cancelled');
      const group = await store.lockRows(tx.selectFrom('execution_groups').selectAll().where('id', '=', id), 'wait').executeTakeFirst();
      if (!group) throw new NotFound('group', id);
      const changed = await tx
        .updateTable('execution_groups')
        .set({ status: 'cancelled', decided_at: now, join_refused: group.join_spec === null ? null : 'cancelled' })
        .where('id', '=', id)
        .where('status', '=', 'running')
        .executeTakeFirst();
      const cancelled = Number(changed.numUpdatedRows) > 0;
      const touched: ExecutionRow[] = [...ended];
      if (group.join_execution_id !== null) {
        const join = await tx.selectFrom('executions').select('status').where('id', '=', group.join_execution_id).executeTakeFirst();
        if (join?.status === 'queued' || join?.status === 'running') {
          const row = await cancelExecution(tx, store, group.join_execution_id, now, actor, 'group_cancelled');
          touched.push(row);
          if (row.status === 'cancelled') ended.push(row);
        }
      }
      await appendAudit(tx, {
        at: now,
        actor,
        action: 'group.cancel',
        subject: id,
        detail: { changed: cancelled, status_before: group.status, members_cancelled: ended.length },
      });
      const followed = await this.engine.follow(tx, now, actor, ended);
      return { cancelled, announced: [...touched, ...followed.created, ...followed.ended] };
    });
    announce(store, out.announced);
    return { changed: out.cancelled };
  }
}

/** Refuse the whole group: every failing item with its reason, in item order (the join last). */
function refuse(refusals: GroupItemRefusal[]): never {
  refusals.sort((a, b) => (a.index === 'join' ? 1 : b.index === 'join' ? -1 : a.index - b.index));
  const first = refusals[0]!;
  throw new BatonError(
    'group_refused',
    `${refusals.length} of the group's items cannot be created now (${first.message}${refusals.length > 1 ? '; …' : ''}); nothing was created`,
    { items: refusals },
  );
}

/**
 * Take a member's idempotency key on its agent, as a submit's Idempotency-Key would be taken
 * (scope `agent:<name>`), stored completed with the member's id. Returns true when the key was
 * already taken (and not expired): the item is refused.
 */
async function claimMemberKey(
  tx: Tx,
  agent: string,
  key: string,
  member: { id: string; index: number; execution_id: string },
  now: number,
  ttlMs: number,
): Promise<boolean> {
  const scope = `agent:${agent}`;
  // An expired key is forgotten, as claimKey forgets it.
  await tx.deleteFrom('idempotency_keys').where('scope', '=', scope).where('idem_key', '=', key).where('expires_at', '<=', now).execute();
  const inserted = await tx
    .insertInto('idempotency_keys')
    .values({
      scope,
      idem_key: key,
      request_hash: fingerprint('group-member', member.id, String(member.index)),
      state: 'completed',
      locked_until: now,
      status_code: 201,
      response: JSON.stringify({ execution_id: member.execution_id, agent, group_id: member.id, group_index: member.index }),
      execution_id: member.execution_id,
      created_at: now,
      expires_at: now + ttlMs,
    })
    .onConflict((oc) => oc.columns(['scope', 'idem_key']).doNothing())
    .returning('scope')
    .executeTakeFirst();
  return !inserted;
}

/**
 * What refuses a group's items before anything is written: unknown agents, no backlog room
 * (read under the new-work turn: exact until the commit), member keys given twice or already used.
 */
async function checkMembers(
  tx: Tx,
  input: GroupInput,
  names: string[],
  agents: Map<string, AgentRow>,
  now: number,
): Promise<GroupItemRefusal[]> {
  const refusals: GroupItemRefusal[] = [];
  // Room in each agent's backlog, read under the new-work turn: exact until the commit.
  const present = [...new Set(names)].filter((n) => agents.has(n));
  const queued = await backlogs(tx, present);
  const room = new Map(present.map((n) => [n, agents.get(n)!.max_backlog - (queued.get(n) ?? 0)]));
  const keysSeen = new Set<string>();
  input.members.forEach((m, index) => {
    const agent = agents.get(m.agent);
    if (!agent) {
      refusals.push({ index, error: 'agent_not_found', message: `members[${index}].agent: agent '${m.agent}' does not exist` });
      return;
    }
    const left = room.get(m.agent)!;
    room.set(m.agent, left - 1);
    if (left <= 0) {
      refusals.push({
        index,
        error: 'backlog_full',
        message: `members[${index}]: agent '${m.agent}' has no room for it (max_backlog ${agent.max_backlog}, counting this group's earlier members)`,
      });
    }
    if (m.idempotency_key) {
      const k = `${m.agent}\n${m.idempotency_key}`;
      if (keysSeen.has(k)) {
        refusals.push({
          index,
          error: 'duplicate_idempotency_key',
          message: `members[${index}].idempotency_key: '${m.idempotency_key}' is given twice for agent '${m.agent}' in this group`,
        });
      }
      keysSeen.add(k);
    }
  });
  const keyed = input.members.flatMap((m, index) => (m.idempotency_key ? [{ m, index, key: m.idempotency_key }] : []));
  if (keyed.length > 0) {
    // Keys already taken on their agents (a submit's Idempotency-Key or another group's member).
    const taken = await tx
      .selectFrom('idempotency_keys')
      .select(['scope', 'idem_key'])
      .where('scope', 'in', [...new Set(keyed.map((k) => `agent:${k.m.agent}`))])
      .where('idem_key', 'in', [...new Set(keyed.map((k) => k.key))])
      .where('expires_at', '>', now)
      .execute();
    const used = new Set(taken.map((t) => `${t.scope.slice('agent:'.length)}\n${t.idem_key}`));
    for (const { m, index, key } of keyed) {
      if (used.has(`${m.agent}\n${key}`)) {
        refusals.push({
          index,
          error: 'duplicate_idempotency_key',
          message: `members[${index}].idempotency_key: '${key}' was already used on agent '${m.agent}'`,
        });
      }
    }
  }
  if (input.join && !agents.has(input.join.agent)) {
    refusals.push({ index: 'join', error: 'agent_not_found', message: `join.agent: agent '${input.join.agent}' does not exist` });
  }
  return refusals;
}
