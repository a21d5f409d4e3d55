import type { CancelReason } from '../../domain/error-codes.ts';
import { AlreadyExists, AlreadyRunning, BacklogFull, NotFound } from '../../domain/errors.ts';
import { newId } from '../../domain/ids.ts';
import { pageOfAgent } from '../../domain/lists.ts';
import type { MisfirePolicy } from '../../domain/policies.ts';
import type { RetryPolicy } from '../../domain/retry.ts';
import type { TriggerKind } from '../../domain/states.ts';
import type { Tx } from '../../store/adapter.ts';
import type { ExecutionRow, ScheduleRow } from '../../store/schema.ts';

/** A schedule as a list reads it: its message and payload only as heads (previewHead). */
export type ScheduleListRow = Omit<ScheduleRow, 'message' | 'payload'> & { message_head: string; payload_head: string };
import { announce } from '../announce.ts';
import { appendAudit } from '../audit.ts';
import type { Followed } from '../composition/follow.ts';
import type { EngineContext } from '../context.ts';
import { statusIs } from '../status-sql.ts';
import { cancelExecution, cancelQueued } from '../transitions/cancel.ts';
import { previewHead } from '../list-executions.ts';
import { requireAgents } from '../require-agents.ts';
import { compileCron, nextAfter } from './cron.ts';
import { lockAgent, startRun, type OverlapPolicy } from './start-run.ts';

export const SCHEDULE_DEFAULTS = Object.freeze({
  timezone: 'UTC',
  overlap: 'skip' as OverlapPolicy,
  misfire: 'run_once' as const,
  /** A tick missed by up to this long still gets its one catch-up run (misfire policy run_once). */
  misfireGraceSeconds: 3600,
});

export interface ScheduleInput {
  name: string;
  cron: string;
  timezone?: string;
  message: string;
  payload?: unknown;
  enabled?: boolean;
  overlap_policy?: OverlapPolicy;
  misfire_policy?: MisfirePolicy;
  misfire_grace_seconds?: number;
  retry_policy?: RetryPolicy | null;
  priority?: number;
}
export type SchedulePatchInput = Partial<ScheduleInput>;

export const newScheduleId = () => newId('sc_');

/** Runs a schedule was asked for by hand, by a webhook, or by a tick all share this one origin shape. */
export interface TriggerRequest {
  actor: string;
  trigger: TriggerKind;
  origin: Record<string, unknown>;
  /** Replaces the schedule's payload for this run (JSON value). */
  payload?: unknown;
  idempotencyKey?: string | null;
  webhookId?: string | null;
  /** Runs inside the creating transaction (stores the idempotent answer with the row). */
  onCreated?: (tx: Tx, row: ExecutionRow) => Promise<void>;
}

function uniqueViolation(err: unknown): boolean {
  const e = err as { code?: string; message?: string };
  return e?.code === '23505' || /UNIQUE constraint failed/.test(e?.message ?? '');
}

/** Schedules: CRUD, manual triggers and deletion. The scheduler loop is in scheduler.ts. */
export class Schedules {
  constructor(private readonly engine: EngineContext) {}

  private get store() {
    return this.engine.store;
  }

  async create(agentName: string, input: ScheduleInput, actor: string): Promise<ScheduleRow> {
    const timezone = input.timezone ?? SCHEDULE_DEFAULTS.timezone;
    const cron = compileCron(input.cron, timezone);
    const now = this.engine.now();
    const enabled = input.enabled ?? true;
    try {
      return await this.store.transaction(async (tx) => {
        const agent = await tx.selectFrom('agents').select('name').where('name', '=', agentName).executeTakeFirst();
        if (!agent) throw new NotFound('agent', agentName);
        const row = await tx
          .insertInto('schedules')
          .values({
            id: newScheduleId(),
            agent: agentName,
            name: input.name,
            cron: input.cron.trim(),
            timezone,
            message: input.message,
            payload: JSON.stringify(input.payload ?? null),
            enabled: enabled ? 1 : 0,
            overlap_policy: input.overlap_policy ?? SCHEDULE_DEFAULTS.overlap,
            misfire_policy: input.misfire_policy ?? SCHEDULE_DEFAULTS.misfire,
            misfire_grace_seconds: input.misfire_grace_seconds ?? SCHEDULE_DEFAULTS.misfireGraceSeconds,
            retry_policy: input.retry_policy ? JSON.stringify(input.retry_policy) : null,
            priority: input.priority ?? 0,
            next_run_at: enabled ? nextAfter(cron, now) : null,
            last_run_at: null,
            created_at: now,
            updated_at: now,
          })
          .returningAll()
          .executeTakeFirstOrThrow();
        await appendAudit(tx, { at: now, actor, action: 'schedule.create', subject: row.id, detail: { agent: agentName } });
        return row;
      });
    } catch (err) {
      if (uniqueViolation(err)) throw new AlreadyExists('schedule', `${agentName}/${input.name}`);
      throw err;
    }
  }

  /** A changed cron, time zone or enabled flag recomputes next_run_at from now (no catch-up for the past). */
  async update(id: string, patch: SchedulePatchInput, actor: string): Promise<ScheduleRow> {
    const now = this.engine.now();
    try {
      return await this.store.transaction(async (tx) => {
        const before = await this.store.lockRows(tx.selectFrom('schedules').selectAll().where('id', '=', id), 'wait').executeTakeFirst();
        if (!before) throw new NotFound('schedule', id);
        const cronText = patch.cron?.trim() ?? before.cron;
        const timezone = patch.timezone ?? before.timezone;
        const cron = compileCron(cronText, timezone);
        const enabled = patch.enabled === undefined ? before.enabled === 1 : patch.enabled;
        const timing = patch.cron !== undefined || patch.timezone !== undefined || enabled !== (before.enabled === 1);
        const next = !enabled ? null : timing || before.next_run_at === null ? nextAfter(cron, now) : before.next_run_at;
        const row = await tx
          .updateTable('schedules')
          .set({
            name: patch.name,
            cron: cronText,
            timezone,
            message: patch.message,
            payload: patch.payload === undefined ? undefined : JSON.stringify(patch.payload),
            enabled: enabled ? 1 : 0,
            overlap_policy: patch.overlap_policy,
            misfire_policy: patch.misfire_policy,
            misfire_grace_seconds: patch.misfire_grace_seconds,
            retry_policy: patch.retry_policy === undefined ? undefined : patch.retry_policy && JSON.stringify(patch.retry_policy),
            priority: patch.priority,
            next_run_at: next,
            updated_at: now,
          })
          .where('id', '=', id)
          .returningAll()
          .executeTakeFirstOrThrow();
        await appendAudit(tx, { at: now, actor, action: 'schedule.update', subject: id, detail: { fields: Object.keys(patch) } });
        return row;
      });
    } catch (err) {
      if (uniqueViolation(err)) throw new AlreadyExists('schedule', patch.name ?? id);
      throw err;
    }
  }

  async get(id: string): Promise<ScheduleRow> {
    const row = await this.store.db.selectFrom('schedules').selectAll().where('id', '=', id).executeTakeFirst();
    if (!row) throw new NotFound('schedule', id);
    return row;
  }

  /**
   * A page of schedules (every agent's, or one agent's) in (agent, name) order, through
   * schedules_agent_name, starting after `after`. Message and payload are cut to their heads in
   * SQL: a schedule may carry 100,000 characters of message and 256 KiB of payload, and a list
   * answers with previews (views.ts, scheduleListView).
   */
  async list(agent: string | undefined, page: { limit: number; after?: { agent: string; name: string } }): Promise<ScheduleListRow[]> {
    let q = this.store.db
      .selectFrom('schedules')
      .select([
        'id',
        'agent',
        'name',
        'cron',
        'timezone',
        'enabled',
        'overlap_policy',
        'misfire_policy',
        'misfire_grace_seconds',
        'retry_policy',
        'priority',
        'next_run_at',
        'last_run_at',
        'created_at',
        'updated_at',
        previewHead('message').as('message_head'),
        previewHead('payload').as('payload_head'),
      ]);
    if (agent) {
      await requireAgents(this.store.db, [agent]);
      q = q.where('agent', '=', agent);
    }
    const after = page.after;
    // A row comparison: both stores seek schedules_agent_name to it (an OR of the two columns
    // scans; with the agent fixed, only the rest of the key is a range inside the agent's part).
    if (after && agent) q = q.where('name', '>', pageOfAgent(after, agent).name);
    else if (after) q = q.where((eb) => eb(eb.refTuple('agent', 'name'), '>', eb.tuple(after.agent, after.name)));
    return q.orderBy('agent').orderBy('name').limit(page.limit).execute();
  }

  /**
   * Delete a schedule: its queued runs are cancelled, running ones are asked to stop, webhooks
   * aimed at it are removed. Execution history stays (rows keep their schedule_id).
   */
  async delete(id: string, actor: string): Promise<{ cancelled: number; cancel_requested: number }> {
    const now = this.engine.now();
    const out = await this.store.transaction(async (tx) => {
      const s = await this.store.lockRows(tx.selectFrom('schedules').selectAll().where('id', '=', id), 'wait').executeTakeFirst();
      if (!s) throw new NotFound('schedule', id);
      const r = await cancelScheduleWork(tx, this.engine, [id], now, actor, 'schedule_deleted');
      await tx.deleteFrom('webhooks').where('schedule_id', '=', id).execute();
      await tx.deleteFrom('schedules').where('id', '=', id).execute();
      await appendAudit(tx, {
        at: now,
        actor,
        action: 'schedule.delete',
        subject: id,
        detail: { agent: s.agent, cancelled: r.cancelled.length, cancel_requested: r.cancelRequested },
      });
      return r;
    });
    announce(this.store, [...out.cancelled, ...out.followed.created, ...out.followed.ended]);
    return { cancelled: out.cancelled.length, cancel_requested: out.cancelRequested };
  }

  /**
   * Start a run of a schedule now (manual trigger, or a webhook aimed at a schedule). The row
   * exists before this returns. Refusals: NotFound (checked first), AlreadyRunning under the
   * `skip` overlap policy (nothing created), BacklogFull. Each outcome is audited; refusals are
   * audited in a committed transaction before the error is thrown.
   */
  async trigger(id: string, req: TriggerRequest): Promise<ExecutionRow> {
    const now = this.engine.now();
    const out = await this.store.transaction(async (tx) => {
      const s = await tx.selectFrom('schedules').selectAll().where('id', '=', id).executeTakeFirst();
      if (!s) throw new NotFound('schedule', id);
      const agent = await lockAgent(tx, this.store, s.agent);
      if (!agent) throw new NotFound('agent', s.agent);
      const action = req.trigger === 'webhook' ? 'webhook.trigger' : 'schedule.trigger';
      const started = await startRun(
        tx,
        this.store,
        agent,
        {
          scheduleId: s.id,
          scheduledFor: null,
          webhookId: req.webhookId ?? null,
          overlap: s.overlap_policy,
          trigger: req.trigger,
          origin: { ...req.origin, schedule_id: s.id },
          message: s.message,
          payload: req.payload === undefined ? s.payload : JSON.stringify(req.payload),
          priority: s.priority,
          retryPolicy: s.retry_policy,
          idempotencyKey: req.idempotencyKey ?? null,
        },
        now,
        req.actor,
        {
          each: (row) => ({
            at: now,
            actor: req.actor,
            action,
            subject: s.id,
            execution_id: row.id,
            detail: { trigger: req.trigger, agent: s.agent, ...(req.webhookId ? { webhook_id: req.webhookId } : {}) },
          }),
        },
      );
      if (started.kind === 'created') {
        await req.onCreated?.(tx, started.row);
        return { started, agent: s.agent };
      }
      const refusal = started.kind === 'busy' ? 'already_running' : 'backlog_full';
      await appendAudit(tx, {
        at: now,
        actor: req.actor,
        action: `${action}.refused`,
        subject: s.id,
        execution_id: started.kind === 'busy' ? started.execution_id : null,
        detail: { error: refusal, trigger: req.trigger, ...(req.webhookId ? { webhook_id: req.webhookId } : {}) },
      });
      return { started, agent: s.agent };
    });
    const { started } = out;
    if (started.kind === 'busy') throw new AlreadyRunning(`schedule '${id}'`, started.execution_id);
    if (started.kind === 'full') throw new BacklogFull(out.agent, started.max_backlog);
    announce(this.store, [started.row]);
    return started.row;
  }
}

/** Cancel the queued runs of these schedules and ask their running ones to stop (caller holds the schedule locks). */
export async function cancelScheduleWork(tx: Tx, engine: EngineContext, ids: string[], now: number, actor: string, reason: CancelReason) {
  if (ids.length === 0) return { cancelled: [] as ExecutionRow[], followed: { created: [], ended: [] } as Followed, cancelRequested: 0 };
  const queued = await engine.store
    .lockRows(tx.selectFrom('executions').selectAll().where('schedule_id', 'in', ids).where('status', '=', statusIs('queued')), 'wait')
    .execute();
  const cancelled = await cancelQueued(tx, queued, now, actor, reason);
  const running = await tx
    .selectFrom('executions')
    .select('id')
    .where('schedule_id', 'in', ids)
    .where('status', '=', statusIs('running'))
    .execute();
  for (const r of running) await cancelExecution(tx, engine.store, r.id, now, actor, reason);
  return { cancelled, followed: await engine.follow(tx, now, actor, cancelled), cancelRequested: running.length };
}
