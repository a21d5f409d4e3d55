import type { SubscriptionOn } from '../../domain/chains.ts';
import { BatonError, NotFound } from '../../domain/errors.ts';
import { newId } from '../../domain/ids.ts';
import type { TriggerKind } from '../../domain/states.ts';
import { validateTemplate, type TemplateShape } from '../../domain/templates.ts';
import type { StoreAdapter, Tx } from '../../store/adapter.ts';
import type { SubscriptionRow } from '../../store/schema.ts';
import { appendAudit } from '../audit.ts';
import { refreshFastPathFacts } from '../fast-path-facts.ts';
import { previewHead } from '../list-executions.ts';
import { requireAgents } from '../require-agents.ts';
import type { EngineContext } from '../context.ts';

/** What a subscription's message and payload templates may name (src/domain/templates.ts). */
export const SOURCE_TEMPLATE_SHAPE: TemplateShape = {
  source: {
    id: 'leaf',
    agent: 'leaf',
    status: 'leaf',
    result: 'any',
    error: { code: 'leaf', message: 'leaf' },
    payload: 'any',
    trigger: 'leaf',
    schedule_id: 'leaf',
  },
};

export interface SubscriptionInput {
  source_agent: string;
  target_agent: string;
  on: SubscriptionOn;
  filter?: { schedule_id?: string | null; trigger?: TriggerKind | null } | null;
  message: string;
  /** JSON template; omitted or null: the task's payload summarises the source. */
  payload?: unknown;
  enabled?: boolean;
}
/** The agents are fixed: a subscription moved to other agents is another subscription. */
export type SubscriptionPatch = Partial<Omit<SubscriptionInput, 'source_agent' | 'target_agent'>>;

export interface SubscriptionQuery {
  /** Subscriptions where the agent is the source or the target. */
  agent?: string;
  source?: string;
  target?: string;
}
export type SubscriptionListRow = Awaited<ReturnType<Subscriptions['list']>>[number];

export const newSubscriptionId = () => newId('su_');

/**
 * Subscriptions (chains): when an execution of `source_agent` reaches a final status
 * that `on` names (and matches the filter), a task starts on `target_agent` in the same
 * transaction (composition/chains.ts). Every change is audited.
 */
export class Subscriptions {
  constructor(private readonly engine: EngineContext) {}

  private get store() {
    return this.engine.store;
  }

  async create(input: SubscriptionInput, actor: string): Promise<SubscriptionRow> {
    checkTemplates(input);
    const now = this.engine.now();
    return this.store.transaction(async (tx) => {
      await requireAgents(tx, [input.source_agent, input.target_agent]);
      await checkScheduleFilter(tx, input.source_agent, input.filter?.schedule_id ?? null);
      const row = await tx
        .insertInto('subscriptions')
        .values({
          id: newSubscriptionId(),
          source_agent: input.source_agent,
          target_agent: input.target_agent,
          on_status: input.on,
          schedule_id: input.filter?.schedule_id ?? null,
          trigger_kind: input.filter?.trigger ?? null,
          message: input.message,
          payload: input.payload === undefined || input.payload === null ? null : JSON.stringify(input.payload),
          enabled: input.enabled === false ? 0 : 1,
          created_at: now,
          created_by: actor,
          updated_at: now,
        })
        .returningAll()
        .executeTakeFirstOrThrow();
      await refreshFastPathFacts(tx, row.source_agent, { lock: this.store });
      await appendAudit(tx, {
        at: now,
        actor,
        action: 'subscription.create',
        subject: row.id,
        detail: { source_agent: row.source_agent, target_agent: row.target_agent, on: row.on_status },
      });
      return row;
    });
  }

  async update(id: string, patch: SubscriptionPatch, actor: string): Promise<SubscriptionRow> {
    checkTemplates(patch);
    const now = this.engine.now();
    return this.store.transaction(async (tx) => {
      const before = await this.store.lockRows(tx.selectFrom('subscriptions').selectAll().where('id', '=', id), 'wait').executeTakeFirst();
      if (!before) throw new NotFound('subscription', id);
      if (patch.filter !== undefined) await checkScheduleFilter(tx, before.source_agent, patch.filter?.schedule_id ?? null);
      const row = await tx
        .updateTable('subscriptions')
        .set({
          on_status: patch.on,
          // A filter given replaces the whole filter: {} or null clears it.
          schedule_id: patch.filter === undefined ? undefined : (patch.filter?.schedule_id ?? null),
          trigger_kind: patch.filter === undefined ? undefined : (patch.filter?.trigger ?? null),
          message: patch.message,
          payload: patch.payload === undefined ? undefined : patch.payload === null ? null : JSON.stringify(patch.payload),
          enabled: patch.enabled === undefined ? undefined : patch.enabled ? 1 : 0,
          updated_at: now,
        })
        .where('id', '=', id)
        .returningAll()
        .executeTakeFirstOrThrow();
      if (row.enabled !== before.enabled) await refreshFastPathFacts(tx, row.source_agent, { lock: this.store });
      await appendAudit(tx, { at: now, actor, action: 'subscription.update', subject: id, detail: { fields: Object.keys(patch) } });
      return row;
    });
  }

  async get(id: string): Promise<SubscriptionRow> {
    const row = await this.store.db.selectFrom('subscriptions').selectAll().where('id', '=', id).executeTakeFirst();
    if (!row) throw new NotFound('subscription', id);
    return row;
  }

  /**
   * A page, oldest first, after `page.after` (created_at, id). An agent named in the query must
   * exist (404 otherwise), like the schedule list. Each filter seeks an index made for it:
   * none → subscriptions_created; source → subscriptions_source_created;
   * target → subscriptions_target_created; both → subscriptions_pair_created. `agent` (source or
   * target) is one limited seek of each side, merged by the database. Message and payload templates are cut to their heads in SQL: a list
   * answers with previews (subscriptionListView).
   */
  async list(q: SubscriptionQuery, page: { limit: number; after?: { created_at: number; id: string } }) {
    const db = this.store.db;
    const named = [q.agent, q.source, q.target].filter((a): a is string => a !== undefined);
    if (named.length > 0) await requireAgents(db, named);
    const seek = (sources: (string | undefined)[], targets: (string | undefined)[], notSource?: string) => {
      let query = db
        .selectFrom('subscriptions')
        .select([
          'id',
          'source_agent',
          'target_agent',
          'on_status',
          'schedule_id',
          'trigger_kind',
          'enabled',
          'created_at',
          'created_by',
          'updated_at',
          previewHead('message').as('message_head'),
          previewHead('payload').as('payload_head'),
        ]);
      for (const a of sources) if (a !== undefined) query = query.where('source_agent', '=', a);
      for (const a of targets) if (a !== undefined) query = query.where('target_agent', '=', a);
      if (notSource !== undefined) query = query.where('source_agent', '<>', notSource);
      const after = page.after;
      // A row comparison: both stores seek the index to it (an OR of the two columns scans).
      if (after) query = query.where((eb) => eb(eb.refTuple('created_at', 'id'), '>', eb.tuple(after.created_at, after.id)));
      return query.orderBy('created_at').orderBy('id').limit(page.limit);
    };
    const agent = q.agent;
    if (agent === undefined) return seek([q.source], [q.target]).execute();
    // As source, and as target of another source (a subscription of an agent to itself is in the first).
    const arms = [
      ...(q.source === undefined || q.source === agent ? [seek([agent], [q.target])] : []),
      ...((q.target === undefined || q.target === agent) && q.source !== agent ? [seek([q.source], [agent], agent)] : []),
    ];
    if (arms.length < 2) return arms[0]?.execute() ?? [];
    const [asSource, asTarget] = arms.map((arm, i) => db.selectFrom(arm.as(`a${i}`)).selectAll());
    return asSource!.unionAll(asTarget!).orderBy('created_at').orderBy('id').limit(page.limit).execute();
  }

  async delete(id: string, actor: string): Promise<void> {
    const now = this.engine.now();
    await this.store.transaction(async (tx) => {
      const gone = await tx.deleteFrom('subscriptions').where('id', '=', id).returningAll().executeTakeFirst();
      if (!gone) throw new NotFound('subscription', id);
      await refreshFastPathFacts(tx, gone.source_agent, { lock: this.store });
      await appendAudit(tx, {
        at: now,
        actor,
        action: 'subscription.delete',
        subject: id,
        detail: { source_agent: gone.source_agent, target_agent: gone.target_agent },
      });
    });
  }
}

/**
 * Remove every subscription where `agent` is the source or the target, in the transaction that
 * deletes the agent (before its cancelled work is followed: nothing chains from or onto an agent
 * being deleted). Returns how many went.
 */
export async function deleteAgentSubscriptions(tx: Tx, store: StoreAdapter, agent: string): Promise<number> {
  const gone = await tx
    .deleteFrom('subscriptions')
    .where((eb) => eb.or([eb('source_agent', '=', agent), eb('target_agent', '=', agent)]))
    .returning(['id', 'source_agent'])
    .execute();
  // Its sources may have lost their last subscription (in name order, as locks are taken).
  const sources = [...new Set(gone.map((g) => g.source_agent))].filter((s) => s !== agent).sort();
  for (const source of sources) await refreshFastPathFacts(tx, source, { lock: store });
  return gone.length;
}

function checkTemplates(input: { message?: string; payload?: unknown }): void {
  if (input.message !== undefined) validateTemplate(input.message, SOURCE_TEMPLATE_SHAPE, 'body.message');
  if (input.payload !== undefined && input.payload !== null) validateTemplate(input.payload, SOURCE_TEMPLATE_SHAPE, 'body.payload');
}

/** A schedule filter names a schedule of the source agent (a typo would otherwise match nothing, silently). */
async function checkScheduleFilter(tx: Tx, sourceAgent: string, scheduleId: string | null): Promise<void> {
  if (scheduleId === null) return;
  const s = await tx.selectFrom('schedules').select('agent').where('id', '=', scheduleId).executeTakeFirst();
  if (!s || s.agent !== sourceAgent) {
    throw new BatonError('validation_error', `body.filter.schedule_id: '${scheduleId}' is not a schedule of agent '${sourceAgent}'`);
  }
}
