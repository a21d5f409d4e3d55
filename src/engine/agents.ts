import { AlreadyExists, BatonError, NotFound } from '../domain/errors.ts';
import type { DeliveryMode } from '../domain/delivery.ts';
import type { RetryPolicy } from '../domain/retry.ts';
import type { SecretBox } from '../domain/secret-box.ts';
import { DEFAULTS } from '../config.ts';
import type { Tx } from '../store/adapter.ts';
import type { AgentRow, ExecutionRow } from '../store/schema.ts';
import { announce } from './announce.ts';
import { appendAudit } from './audit.ts';
import { liveCountsByAgent } from './live-counts.ts';
import { BREAKER_DEFAULTS, freshWindow, type BreakerConfig } from '../domain/breaker.ts';
import type { AlertSinkKind } from '../domain/canary.ts';
import { closeBreaker } from './breaker.ts';
import { readAgentSeats, readAgentSeries, type AgentSeats, type AgentSeries } from './agent-activity.ts';
import type { ActivityWindow } from '../domain/activity.ts';
import { statusIs } from './status-sql.ts';
import { cancelExecution, cancelQueued } from './transitions/cancel.ts';
import type { Followed } from './composition/follow.ts';
import { readCurrentWindows } from './budget.ts';
import { liveKeys } from './flow-keys-read.ts';
import type { Throttle } from '../domain/throttle.ts';
import { ADMISSION_ORDER } from '../domain/flow.ts';
import { budgetStatus, parseBudget, type Budget, type LimitStatus } from '../domain/budget.ts';
import { deleteAgentSubscriptions } from './composition/subscriptions.ts';
import { refreshFastPathFacts } from './fast-path-facts.ts';
import { requireAgents } from './require-agents.ts';
import { agentFlowColumns, writeAgentPools, type AgentFlowInput } from './pools.ts';
import type { EngineContext } from './context.ts';
import { holdView, type HoldView } from '../domain/admission.ts';
import { admissionNow } from './holds.ts';

/** An agent with its live counts and what stops it admitting now (null: nothing). */
export interface ListedAgent {
  agent: AgentRow;
  running: number;
  queued: number;
  hold: HoldView | null;
}

interface AgentSettings {
  name: string;
  description?: string | null;
  max_parallel?: number;
  max_backlog?: number;
  timeout_seconds?: number;
  lease_ttl_seconds?: number;
  max_redeliveries?: number;
  delivery?: DeliveryMode;
  push_url?: string | null;
  /** Push signing secret, plain: the engine stores it encrypted and never returns it. */
  push_secret?: string | null;
  /** Default retry policy of the agent's executions (null: no retries). */
  retry_policy?: RetryPolicy | null;
  /** Circuit breaker (src/domain/breaker.ts); null: off. Omitted at creation: BREAKER_DEFAULTS. */
  breaker?: BreakerConfig | null;
  /** Per-window spending limits (src/domain/budget.ts); null: none (the default). */
  budget?: Budget | null;
  /** Per-key limits (src/domain/flow.ts): the cap of every key, caps of single keys, a throttle per key. */
  key_max_parallel?: number | null;
  key_overrides?: Record<string, number> | null;
  key_throttle?: Throttle | null;
}
export type AgentInput = AgentSettings & AgentFlowInput;
export type AgentPatch = Partial<Omit<AgentInput, 'name'>>;

/** The stored JSON of the per-key settings given (absent stays absent: a patch leaves them). */
function keyColumns(i: Pick<AgentInput, 'key_overrides' | 'key_throttle'>) {
  const json = (v: unknown) => (v === undefined ? undefined : v === null ? null : JSON.stringify(v));
  return { key_overrides: json(i.key_overrides), key_throttle: json(i.key_throttle) };
}

/** Queued executions an agent's deletion cancels per transaction before its last (Agents.delete). */
export const AGENT_DELETE_CHUNK = 500;
/** What the agents service needs of the engine beyond its context: the secret box, the alert sinks, and follow's full form. */
export interface AgentsContext extends EngineContext {
  readonly secrets: SecretBox;
  readonly alertSinks: readonly AlertSinkKind[];
  follow(
    tx: Tx,
    now: number,
    actor: string,
    rows: readonly ExecutionRow[],
    unsubscribed?: ReadonlySet<string>,
    deleting?: string,
  ): Promise<Followed>;
}

/** Agents: create, change, pause, resume, delete, and what the API reads of them (engine.agents). */
export class Agents {
  constructor(private readonly engine: AgentsContext) {}

  private get store() {
    return this.engine.store;
  }

  async create(input: AgentInput, actor: string): Promise<AgentRow> {
    const now = this.engine.now();
    return this.store.transaction(async (tx) => {
      const exists = await tx.selectFrom('agents').select('name').where('name', '=', input.name).executeTakeFirst();
      if (exists) throw new AlreadyExists('agent', input.name);
      const row = await tx
        .insertInto('agents')
        .values({
          name: input.name,
          description: input.description ?? null,
          max_parallel: input.max_parallel ?? DEFAULTS.maxParallel,
          max_backlog: input.max_backlog ?? DEFAULTS.maxBacklog,
          timeout_seconds: input.timeout_seconds ?? DEFAULTS.timeoutSeconds,
          lease_ttl_seconds: input.lease_ttl_seconds ?? DEFAULTS.leaseTtlSeconds,
          max_redeliveries: input.max_redeliveries ?? DEFAULTS.maxRedeliveries,
          delivery: input.delivery ?? 'pull',
          push_url: input.push_url ?? null,
          push_secret: input.push_secret ? this.engine.secrets.seal(input.push_secret) : null,
          retry_policy: input.retry_policy ? JSON.stringify(input.retry_policy) : null,
          budget: input.budget ? JSON.stringify(input.budget) : null,
          key_max_parallel: input.key_max_parallel ?? null,
          ...keyColumns(input),
          // New agents get a breaker unless they say null; agents made before breakers existed stay off.
          breaker_config: input.breaker === null ? null : JSON.stringify(input.breaker ?? BREAKER_DEFAULTS),
          breaker_recent: input.breaker === null ? '' : freshWindow(input.breaker ?? BREAKER_DEFAULTS),
          ...agentFlowColumns(input),
          created_at: now,
          updated_at: now,
        })
        // Made meanwhile by a concurrent create (the read above saw none): the same 409, not a key error.
        .onConflict((oc) => oc.column('name').doNothing())
        .returningAll()
        .executeTakeFirst();
      if (!row) throw new AlreadyExists('agent', input.name);
      const running = await this.countInheritedWork(tx, input.name);
      await writeAgentPools(tx, this.store, input.name, input.pools);
      const facts = await refreshFastPathFacts(tx, input.name);
      await appendAudit(tx, { at: now, actor, action: 'agent.create', subject: input.name });
      return { ...row, running_count: running, ...facts };
    });
  }

  /**
   * A name may have been an agent's before: its work still running (asked to stop when it was
   * deleted), or handed back to the queue since, carries the name and counts against the new agent
   * (its cap and backlog) until it ends. The counters start from those rows, not from zero, or the
   * new agent would run past its cap and its counter end below zero when they finish (the canary's
   * S-04 and S-05). The rows are locked (PostgreSQL): a change racing this either commits first and
   * is not counted (its trigger found no agent row to change), or waits and then changes the new row.
   * Returns the seats in use it set.
   */
  private async countInheritedWork(tx: Tx, name: string): Promise<number> {
    const live = (status: 'running' | 'queued') =>
      this.store
        .lockRows(tx.selectFrom('executions').select('id').where('agent', '=', name).where('status', '=', statusIs(status)), 'wait')
        .execute();
    const running = (await live('running')).length;
    const queued = (await live('queued')).length;
    if (queued > 0) await tx.updateTable('agent_backlog').set({ queued_in: queued }).where('agent', '=', name).execute();
    if (running > 0) await tx.updateTable('agents').set({ running_count: running }).where('name', '=', name).execute();
    return running;
  }

  /** Lowering `max_parallel` never interrupts running work: it only stops new admissions. */
  async update(name: string, patch: AgentPatch, actor: string): Promise<AgentRow> {
    const now = this.engine.now();
    // The breaker is stored as JSON in breaker_config; key overrides and throttles as JSON too.
    const { breaker, key_overrides, key_throttle, pools, throttle, ...columns } = patch;
    const row = await this.store.transaction(async (tx) => {
      const updated = await tx
        .updateTable('agents')
        .set({
          ...columns,
          push_secret: patch.push_secret === undefined ? undefined : patch.push_secret && this.engine.secrets.seal(patch.push_secret),
          retry_policy: patch.retry_policy === undefined ? undefined : patch.retry_policy && JSON.stringify(patch.retry_policy),
          // A raised limit releases a spent budget at the next admission (the publish below wakes claims).
          budget: patch.budget === undefined ? undefined : patch.budget && JSON.stringify(patch.budget),
          breaker_config: breaker === undefined ? undefined : breaker && JSON.stringify(breaker),
          ...keyColumns({ key_overrides, key_throttle }),
          ...agentFlowColumns({ pools, throttle }),
          updated_at: now,
        })
        .where('name', '=', name)
        .returningAll()
        .executeTakeFirst();
      if (!updated) throw new NotFound('agent', name);
      // As on creation: a push agent needs somewhere to push (the transaction undoes the patch).
      if (updated.delivery === 'push' && !updated.push_url)
        throw new BatonError('validation_error', "body.push_url: required when delivery is 'push'");
      await writeAgentPools(tx, this.store, name, pools);
      const facts = await refreshFastPathFacts(tx, name);
      await appendAudit(tx, { at: now, actor, action: 'agent.update', subject: name, detail: { fields: Object.keys(patch) } });
      return { ...updated, ...facts };
    });
    this.store.publish('agent', name); // a raised cap may admit waiting work
    return row;
  }

  /** Cancels the agent's queued work, asks its running work to stop, removes the agent. History stays. */
  async delete(name: string, actor: string): Promise<{ cancelled: number; cancel_requested: number }> {
    const now = this.engine.now();
    // A deep backlog first, in chunks of AGENT_DELETE_CHUNK, each its own transaction with a turn
    // of the event loop after it: on SQLite a deep backlog cancelled in one transaction held the
    // server for seconds (max_backlog allows 1,000,000). Its subscriptions go in the first (not read
    // again), so these cancellations start nothing; a group its cancelled members decide refuses a join on this
    // agent (agent_missing), as it will once the row is gone. Work submitted meanwhile is cancelled
    // in the last transaction. A crash between chunks leaves the agent with part of its backlog
    // cancelled; deleting it again finishes.
    let early = 0;
    let unsubscribed = 0;
    for (;;) {
      const chunk = await this.store.transaction(async (tx) => {
        const agent = await this.store.lockRows(tx.selectFrom('agents').select('name').where('name', '=', name), 'wait').executeTakeFirst();
        if (!agent) throw new NotFound('agent', name);
        if (early === 0) unsubscribed += await deleteAgentSubscriptions(tx, this.store, name);
        const queued = await this.store
          .lockRows(
            tx
              .selectFrom('executions')
              .selectAll()
              .where('agent', '=', name)
              .where('status', '=', statusIs('queued'))
              // In admission order: the queue's own index gives it, so a backlog of any size is
              // read a chunk at a time rather than sorted, and it is one total order, so every
              // store cancels, and decides their groups, in the same order.
              .orderBy(ADMISSION_ORDER)
              .limit(AGENT_DELETE_CHUNK),
            'wait',
          )
          .execute();
        const cancelled = await cancelQueued(tx, queued, now, actor, 'agent_deleted');
        return { cancelled, followed: await this.engine.follow(tx, now, actor, cancelled, new Set([name]), name) };
      });
      announce(this.store, [...chunk.cancelled, ...chunk.followed.created, ...chunk.followed.ended]);
      early += chunk.cancelled.length;
      if (chunk.cancelled.length < AGENT_DELETE_CHUNK) break;
      await new Promise((r) => setImmediate(r));
    }
    const out = await this.store.transaction(async (tx) => {
      const agent = await this.store.lockRows(tx.selectFrom('agents').select('name').where('name', '=', name), 'wait').executeTakeFirst();
      if (!agent) throw new NotFound('agent', name);
      const queued = await this.store
        .lockRows(
          tx
            .selectFrom('executions')
            .selectAll()
            .where('agent', '=', name)
            .where('status', '=', statusIs('queued'))
            .orderBy(ADMISSION_ORDER),
          'wait',
        )
        .execute();
      const cancelled = await cancelQueued(tx, queued, now, actor, 'agent_deleted');
      const running = await tx
        .selectFrom('executions')
        .select('id')
        .where('agent', '=', name)
        .where('status', '=', statusIs('running'))
        .execute();
      // In id order, as every transaction that locks several executions takes them: no cycle
      // (sorted here: the few running rows come through their partial index unsorted).
      running.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
      for (const r of running) await cancelExecution(tx, this.store, r.id, now, actor, 'agent_deleted');
      // Its subscriptions and its row go before what the cancellations cause: nothing chains from,
      // or onto, an agent being deleted, and a group its cancelled members decide finds no agent
      // for a join on it (join_refused agent_missing), instead of a task for an agent about to vanish.
      const subscriptions = unsubscribed + (await deleteAgentSubscriptions(tx, this.store, name));
      await tx.deleteFrom('agents').where('name', '=', name).execute();
      const followed = await this.engine.follow(tx, now, actor, cancelled);
      // Its spending goes with it: an agent created later under the same name starts at 0.
      await tx.deleteFrom('agent_budget_ledger').where('agent', '=', name).execute();
      // Its keys go with it: a later agent of the same name must not be served to them.
      const revoked = await tx
        .updateTable('api_keys')
        .set({ revoked_at: now })
        .where('scope', '=', 'agent')
        .where('agent', '=', name)
        .where('revoked_at', 'is', null)
        .returning('id')
        .execute();
      // Its triggers go with it (their runs were cancelled above with the rest of its work).
      await tx.deleteFrom('webhooks').where('agent', '=', name).execute();
      await tx.deleteFrom('schedules').where('agent', '=', name).execute();
      await appendAudit(tx, {
        at: now,
        actor,
        action: 'agent.delete',
        subject: name,
        detail: {
          cancelled: early + cancelled.length,
          cancel_requested: running.length,
          keys_revoked: revoked.length,
          subscriptions_deleted: subscriptions,
        },
      });
      return { cancelled, followed, cancel_requested: running.length, revoked: revoked.map((k) => k.id) };
    });
    announce(this.store, [...out.cancelled, ...out.followed.created, ...out.followed.ended]);
    for (const id of out.revoked) this.store.publish('key', id);
    return { cancelled: early + out.cancelled.length, cancel_requested: out.cancel_requested };
  }

  /**
   * Pause an agent: it admits nothing (claims return nothing, push dispatch starts nothing) until
   * resumed; its queue keeps filling up to its backlog and running work finishes. Idempotent: a
   * paused agent keeps its first who, why and since (`changed: false`). The update takes the
   * agent row's lock, which every admission takes first, so once this commits no process admits.
   */
  async pause(name: string, reason: string, actor: string): Promise<{ agent: AgentRow; changed: boolean }> {
    const now = this.engine.now();
    const out = await this.store.transaction(async (tx) => {
      const paused = await tx
        .updateTable('agents')
        .set({ paused_at: now, paused_by: actor, paused_reason: reason })
        .where('name', '=', name)
        .where('paused_at', 'is', null)
        .returningAll()
        .executeTakeFirst();
      if (paused) {
        const facts = await refreshFastPathFacts(tx, name);
        await appendAudit(tx, { at: now, actor, action: 'agent.pause', subject: name, detail: { reason } });
        return { agent: { ...paused, ...facts }, changed: true };
      }
      const agent = await tx.selectFrom('agents').selectAll().where('name', '=', name).executeTakeFirst();
      if (!agent) throw new NotFound('agent', name);
      return { agent, changed: false };
    });
    if (out.changed) this.store.publish('agent', name);
    return out;
  }

  /** Resume a paused agent: admission goes on at once (waiting claimers are woken). Idempotent. */
  async resume(name: string, actor: string): Promise<{ agent: AgentRow; changed: boolean }> {
    const now = this.engine.now();
    const out = await this.store.transaction(async (tx) => {
      const before = await this.store
        .lockRows(tx.selectFrom('agents').selectAll().where('name', '=', name), 'admission')
        .executeTakeFirst();
      if (!before) throw new NotFound('agent', name);
      if (before.paused_at === null) return { agent: before, changed: false };
      const agent = await tx
        .updateTable('agents')
        .set({ paused_at: null, paused_by: null, paused_reason: null })
        .where('name', '=', name)
        .returningAll()
        .executeTakeFirstOrThrow()
        .then(async (row) => ({ ...row, ...(await refreshFastPathFacts(tx, name)) }));
      await appendAudit(tx, {
        at: now,
        actor,
        action: 'agent.resume',
        subject: name,
        detail: { paused_by: before.paused_by, paused_reason: before.paused_reason, paused_ms: now - Number(before.paused_at) },
      });
      return { agent, changed: true };
    });
    if (out.changed) this.store.publish('agent', name); // claimers and the dispatcher look again now
    return out;
  }

  /**
   * Close the agent's circuit breaker by hand (src/domain/breaker.ts): admission resumes at once
   * and its failure counts start afresh. Idempotent (`changed: false` when it was closed).
   */
  async closeBreaker(name: string, actor: string): Promise<{ agent: AgentRow; changed: boolean }> {
    const now = this.engine.now();
    const out = await this.store.transaction(async (tx) => {
      const exists = await tx.selectFrom('agents').select('name').where('name', '=', name).executeTakeFirst();
      if (!exists) throw new NotFound('agent', name);
      const changed = await closeBreaker(tx, this.store, name, now, actor, this.engine.alertSinks);
      const agent = await tx.selectFrom('agents').selectAll().where('name', '=', name).executeTakeFirstOrThrow();
      return { agent, changed };
    });
    if (out.changed) this.store.publish('agent', name); // claimers and the dispatcher look again now
    return out;
  }

  /** Whether the agent is paused now (null: it admits, or it does not exist): what trigger answers say. */
  async pauseState(name: string): Promise<{ by: string; reason: string; since: number } | null> {
    const a = await this.store.db
      .selectFrom('agents')
      .select(['paused_at', 'paused_by', 'paused_reason'])
      .where('name', '=', name)
      .executeTakeFirst();
    if (!a || a.paused_at === null) return null;
    return { by: a.paused_by ?? 'unknown', reason: a.paused_reason ?? '', since: Number(a.paused_at) };
  }

  async get(name: string): Promise<ListedAgent> {
    const agent = await this.store.db.selectFrom('agents').selectAll().where('name', '=', name).executeTakeFirst();
    if (!agent) throw new NotFound('agent', name);
    const counts = await liveCountsByAgent(this.store.db, [name]);
    return { agent, ...(counts.get(name) ?? { running: 0, queued: 0 }), hold: await this.holdOf(agent) };
  }

  /**
   * What stops the agent admitting now, decided as admission decides it (admissionNow): no read
   * for an agent without a budget whose breaker is not half-open, a primary-key seek otherwise.
   */
  private async holdOf(agent: AgentRow): Promise<HoldView | null> {
    const now = this.engine.now();
    return holdView((await admissionNow(this.store.db, agent, now)).hold, now);
  }

  /** NotFound unless the agent exists: a stream or filter that names an unknown agent is refused, not left empty. */
  async require(name: string): Promise<void> {
    await requireAgents(this.store.db, [name]);
  }

  /** An agent's live keys, a page in key order (flow-keys-read.ts). */
  keys(name: string, opts: { limit?: number; after?: string }) {
    return liveKeys(this.store.db, name, { ...opts, now: this.engine.now() });
  }

  /**
   * An agent's budget now: each limit with its current window's spending and when it resets
   * (GET /v1/agents/{agent}/budget). One primary-key read of the agent and one of the ledger.
   */
  async budget(name: string): Promise<{ time_zone: string; limits: LimitStatus[] }> {
    const agent = await this.store.db.selectFrom('agents').select('budget').where('name', '=', name).executeTakeFirst();
    if (!agent) throw new NotFound('agent', name);
    const budget = parseBudget(agent.budget);
    if (!budget) return { time_zone: 'UTC', limits: [] };
    const now = this.engine.now();
    return {
      time_zone: budget.time_zone ?? 'UTC',
      limits: budgetStatus(budget, await readCurrentWindows(this.store.db, name, budget, now), now),
    };
  }

  /** Every agent's delivery settings, by name: what the push dispatcher reads each pass (no counts). */
  deliverySettings(): Promise<Array<Pick<AgentRow, 'name' | 'delivery' | 'push_url' | 'push_secret'>>> {
    return this.store.db.selectFrom('agents').select(['name', 'delivery', 'push_url', 'push_secret']).orderBy('name').execute();
  }

  /** A page of agents in name order, after `after`, with their live counts (`only`: that agent alone, if it is on the page). */
  async list(page: { limit: number; after?: string; only?: string }): Promise<ListedAgent[]> {
    let q = this.store.db.selectFrom('agents').selectAll().orderBy('name').limit(page.limit);
    if (page.after !== undefined) q = q.where('name', '>', page.after);
    if (page.only !== undefined) q = q.where('name', '=', page.only);
    const agents = await q.execute();
    const counts = await liveCountsByAgent(
      this.store.db,
      agents.map((a) => a.name),
    );
    const holds = await Promise.all(agents.map((a) => this.holdOf(a)));
    return agents.map((agent, i) => ({ agent, ...(counts.get(agent.name) ?? { running: 0, queued: 0 }), hold: holds[i]! }));
  }

  /**
   * An agent's completions, failures, duration percentiles, queue depth and seats in use over a
   * window, in buckets (see agent-activity.ts): capped seeks, on the reader like the lists.
   */
  async series(agent: string, window: ActivityWindow): Promise<AgentSeries & { max_parallel: number }> {
    const max_parallel = await this.seatCap(agent);
    return { ...(await readAgentSeries(this.store.reader, agent, window, this.engine.now())), max_parallel };
  }

  /** Which run held which of an agent's seats when over a window, and what waits now. */
  async seats(agent: string, window: ActivityWindow): Promise<AgentSeats & { max_parallel: number }> {
    const max_parallel = await this.seatCap(agent);
    return { ...(await readAgentSeats(this.store.reader, agent, window, this.engine.now())), max_parallel };
  }

  /** The agent's max_parallel, or NotFound. */
  private async seatCap(name: string): Promise<number> {
    const found = await this.store.db.selectFrom('agents').select('max_parallel').where('name', '=', name).executeTakeFirst();
    if (!found) throw new NotFound('agent', name);
    return found.max_parallel;
  }
}
