import { AlreadyExists, BacklogFull, BatonError, NotFound } from '../domain/errors.ts';
import { newExecutionId } from '../domain/ids.ts';
import type { DeliveryMode } from '../domain/delivery.ts';
import type { RetryPolicy } from '../domain/retry.ts';
import type { CompletionStatus, ExecutionStatus, TriggerKind } from '../domain/states.ts';
import type { Outcome, Reaped, StoredOutcome } from '../domain/outcomes.ts';
import { NO_SECRET_BOX, type SecretBox } from '../domain/secret-box.ts';
import { DEFAULTS, defaultNodeId } from '../config.ts';
import type { StoreAdapter, StoreKind, Tx } from '../store/adapter.ts';
import type { Topic } from '../store/signals.ts';
import type { AgentRow, ExecutionRow } from '../store/schema.ts';
import { lockAgentsForNewWork } from './agent-lock.ts';
import { announce, parseAnnouncement } from './announce.ts';
import { appendAudit, auditRow } from './audit.ts';
import { liveCountsByAgent } from './live-counts.ts';
import { waitingFor } from './waiting.ts';
import type { WaitingView } from '../domain/admission.ts';
import { BREAKER_DEFAULTS, type BreakerConfig } from '../domain/breaker.ts';
import type { AlertSinkKind } from '../domain/canary.ts';
import { closeBreaker, countTowardBreakers, readCompletionProfile } from './breaker.ts';
import { readAgentSeats, readAgentSeries, type AgentSeats, type AgentSeries } from './agent-activity.ts';
import { retryFailedExecution } from './manual-retry.ts';
import type { ActivityWindow } from '../domain/activity.ts';
import { listExecutions, type ExecutionFilter, type ExecutionListRow } from './list-executions.ts';
import { Logs } from './logs.ts';
import { LARGE_JSON_CHARS, RawJson } from '../domain/json.ts';
import { redactJsonText, redactSecrets, redactToJson } from '../domain/redact.ts';
import { statusIs } from './status-sql.ts';
import { EngineEvents } from './events.ts';
import { admit, type AdmitOptions } from './transitions/admit.ts';
import { cancelExecution, cancelQueued } from './transitions/cancel.ts';
import { completeWithLease, completionRequest } from './transitions/complete.ts';
import { Gathered } from './gather.ts';
import { createExecutions, queuedValues, type NewQueued, type SubmitFields } from './transitions/create.ts';
import type { ClaimRequest, CompletionRequest, SubmitRequest, Submitted } from '../store/fast-paths.ts';
import { outcomeMayCompleteFast } from '../domain/fast-paths.ts';
import { refreshFastPathFacts } from './fast-path-facts.ts';
import { expireOnce } from './transitions/expire.ts';
import { lockExecution } from './transitions/lease.ts';
import { followFinals, type Followed } from './composition/follow.ts';
import { releaseAlone, releaseLease } from './transitions/release.ts';
import { insertRetry } from './transitions/retry.ts';
import { renewLease, type Renewed } from './transitions/renew.ts';
import { clearLapseHold } from './transitions/lapse.ts';
import { accrueBudget, readCurrentWindows } from './budget.ts';
import { budgetStatus, parseBudget, type Budget, type LimitStatus } from '../domain/budget.ts';
import { IDEMPOTENCY, Idempotency, type StoredAnswer } from './triggers/idempotency.ts';
import { KeyRace, submitBatch, type BatchOutcome } from './submit-many.ts';
import { BATCH } from '../domain/batch.ts';
import { Schedules } from './triggers/schedules.ts';
import { Webhooks } from './triggers/webhooks.ts';
import { deleteAgentSubscriptions, Subscriptions } from './composition/subscriptions.ts';
import { Waiters } from './waiters.ts';
import { Groups } from './composition/group-service.ts';
import { requireAgents } from './require-agents.ts';

/**
 * Glossary
 * - agent: a named target with a cap (`max_parallel` seats) and a backlog limit.
 * - execution: one requested run of a task on an agent; its row is the only record of it.
 * - seat: a `running` row with a lease. There is no other slot record to leak.
 * - lease: (owner, token, expiry) on a running row; renewed by heartbeats; the token fences
 *   every write from the worker that holds it.
 */

export interface EngineOptions {
  store: StoreAdapter;
  /** Milliseconds since the epoch. Tests inject a clock they can move. Default Date.now. */
  clock?: () => number;
  /** Names this process in lease owners and event actors. */
  nodeId?: string;
  cancelGraceMs?: number;
  backlogExpiryMs?: number;
  claimPollMs?: number;
  /** Rows one reaper pass handles per transaction. Default 100. */
  reapBatch?: number;
  /**
   * Encrypts push signing secrets at rest. `baton up` passes lazySecretBox(dataDir) from
   * src/delivery/secrets.ts; without one, storing or reading a push secret throws.
   */
  secrets?: SecretBox;
  /**
   * Alert sinks configured (kinds only; the URLs stay with the canary, which delivers): a circuit
   * breaker change queues one canary_alerts row per kind in its transaction. Default none.
   */
  alertSinks?: readonly AlertSinkKind[];
  /** Longest chain of subscriptions a task may sit at the end of; further links are refused and recorded. Default 10. */
  chainDepthLimit?: number;
}

export interface AgentInput {
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
}
export type AgentPatch = Partial<Omit<AgentInput, 'name'>>;

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
}

/** One item of a batch submit: the task, and its idempotency key (`hash`: the request's fingerprint) if given. */
export interface SubmitManyItem extends SubmitInput {
  idem?: { key: string; hash: string };
}

export interface SubmitManyOptions {
  /** How long a first-used key remembers its answer. Default IDEMPOTENCY.ttlMs. */
  ttlMs?: number;
  /** The answer stored with each keyed item created (what a replay returns). Default `{ execution_id, status, agent }`. */
  answerFor?: (row: ExecutionRow) => StoredAnswer;
}

export type { BatchOutcome };

export interface ClaimOptions {
  owner: string;
  /** Most tasks to return. Default 1. */
  max?: number;
  /** `pull` (default): a worker; `push`: Baton's own dispatcher. The agent's delivery must match. */
  delivery?: DeliveryMode;
  /** Long-poll: how long to wait for work when none is admissible. Default 0. */
  waitMs?: number;
  signal?: AbortSignal;
}

export type { ExecutionFilter, ExecutionListRow };

/** Queued executions an agent's deletion cancels per transaction before its last (deleteAgent). */
export const AGENT_DELETE_CHUNK = 500;

export class Engine {
  readonly store: StoreAdapter;
  readonly events = new EngineEvents();
  readonly nodeId: string;
  readonly cancelGraceMs: number;
  readonly backlogExpiryMs: number;
  private readonly clock: () => number;
  private readonly claimPollMs: number;
  private readonly reapBatch: number;
  readonly alertSinks: readonly AlertSinkKind[];
  readonly chainDepthLimit: number;
  readonly secrets: SecretBox;
  /** Cron schedules: create, change, trigger by hand (the scheduler pass fires them). */
  readonly schedules: Schedules;
  /** Inbound webhooks: create, rotate, deliver (they start runs, of an agent or a schedule). */
  readonly webhooks: Webhooks;
  /** Execution logs: append (lease-fenced), read, wake on new lines. */
  readonly logs: Logs;
  /** Idempotency keys: claim, complete, release (the API's Idempotency-Key). */
  readonly idempotency: Idempotency;
  /** Chains: when an agent's execution ends a given way, start a task on another (composition/chains.ts). */
  readonly subscriptions: Subscriptions;
  /** Groups: fan-out with a join (composition/group-service.ts; the decision: composition/groups.ts). */
  readonly groups: Groups;
  private readonly waiters = new Waiters();
  /** Plain submits and completions that cause nothing else, many to a call (store.fastPaths; gather.ts). */
  private readonly plainSubmits: Gathered<SubmitRequest, Submitted> | undefined;
  private readonly loneCompletions: Gathered<CompletionRequest, ExecutionRow | undefined> | undefined;
  /** Claims, many agents to a call (store.fastPaths; gather.ts); each answers with its rows, or undefined: admit in a transaction. */
  private readonly plainClaims: Gathered<ClaimRequest, ExecutionRow[] | undefined> | undefined;
  private readonly unsubscribe: () => void;
  /** Waiting long-poll claims; close() wakes them all so shutdown does not wait for them. */
  private readonly activeClaims = new Set<AbortController>();
  private closed = false;

  constructor(opts: EngineOptions) {
    this.store = opts.store;
    this.clock = opts.clock ?? Date.now;
    this.nodeId = opts.nodeId ?? defaultNodeId();
    this.cancelGraceMs = opts.cancelGraceMs ?? DEFAULTS.cancelGraceMs;
    this.backlogExpiryMs = opts.backlogExpiryMs ?? DEFAULTS.backlogExpiryMs;
    this.claimPollMs = opts.claimPollMs ?? DEFAULTS.claimPollMs;
    this.reapBatch = opts.reapBatch ?? 100;
    this.alertSinks = opts.alertSinks ?? [];
    this.chainDepthLimit = opts.chainDepthLimit ?? DEFAULTS.chainDepthLimit;
    this.secrets = opts.secrets ?? NO_SECRET_BOX;
    const fast = this.store.fastPaths;
    if (fast) {
      // A submit the call refused is made alone, which says why.
      const submitOne = (i: SubmitRequest) => fast.submitOne(i);
      this.plainSubmits = new Gathered({ many: (items) => fast.submitGathered(items), one: submitOne, absent: submitOne });
      this.loneCompletions = new Gathered({
        many: (items) => fast.completeMany(items),
        one: async (i) => (await fast.completeMany([i])).get(i.id),
        // Not completed alone: its transaction does what it causes, or explains the refusal.
        absent: async () => undefined,
      });
      this.plainClaims = new Gathered({
        many: (items) => fast.claimMany(items),
        one: async (i) => (await fast.claimMany([i])).get(i.id),
        // Not decided by the call (a hold may apply, a serial key, an unknown agent): its transaction decides.
        absent: async () => undefined,
      });
    }
    // Sub-services see the engine only as their context (store, clock): built once, here.
    this.schedules = new Schedules(this);
    this.webhooks = new Webhooks(this, this.schedules);
    this.logs = new Logs(this);
    this.idempotency = new Idempotency(this);
    this.subscriptions = new Subscriptions(this);
    this.groups = new Groups(this);
    // One path for every status change, local or from another process: wake claimers of that
    // agent when work was queued or a seat freed, and tell in-process listeners (SSE, metrics).
    const offExecution = this.store.subscribe('execution', (message, local) => {
      const { agent, ids, status } = parseAnnouncement(message);
      if (status !== 'running') this.waiters.wake(agent);
      for (const id of ids) this.events.emit('execution:changed', { id, agent, status, local });
    });
    const offAgent = this.store.subscribe('agent', (agent) => this.waiters.wake(agent, true));
    this.unsubscribe = () => {
      offExecution();
      offAgent();
    };
  }

  now(): number {
    return this.clock();
  }

  close(): void {
    this.closed = true;
    for (const c of this.activeClaims) c.abort();
    this.unsubscribe();
  }

  /** Listen to a store signal (`key`: a key was revoked; `agent`: an agent changed), from any process. Returns the unsubscribe. */
  subscribe(topic: Topic, listener: (message: string) => void): () => void {
    return this.store.subscribe(topic, listener);
  }

  /** The store's kind and whether every known migration is applied (GET /readyz). Rejects when the store does not answer. */
  async storeStatus(): Promise<{ kind: StoreKind; migrated: boolean }> {
    const { applied, known } = await this.store.migrationStatus();
    return { kind: this.store.describe().kind, migrated: known.every((v) => applied.includes(v)) };
  }

  // ── agents ────────────────────────────────────────────────────────────────

  async createAgent(input: AgentInput, actor: string): Promise<AgentRow> {
    const now = this.now();
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
          push_secret: input.push_secret ? this.secrets.seal(input.push_secret) : null,
          retry_policy: input.retry_policy ? JSON.stringify(input.retry_policy) : null,
          budget: input.budget ? JSON.stringify(input.budget) : null,
          // New agents get a breaker unless they say null; agents from before 0011 stay off.
          breaker_config: input.breaker === null ? null : JSON.stringify(input.breaker ?? BREAKER_DEFAULTS),
          created_at: now,
          updated_at: now,
        })
        .returningAll()
        .executeTakeFirstOrThrow();
      const running = await this.countInheritedWork(tx, input.name);
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
  async updateAgent(name: string, patch: AgentPatch, actor: string): Promise<AgentRow> {
    const now = this.now();
    const { breaker, ...columns } = patch; // the breaker is stored as JSON in breaker_config
    const row = await this.store.transaction(async (tx) => {
      const updated = await tx
        .updateTable('agents')
        .set({
          ...columns,
          push_secret: patch.push_secret === undefined ? undefined : patch.push_secret && this.secrets.seal(patch.push_secret),
          retry_policy: patch.retry_policy === undefined ? undefined : patch.retry_policy && JSON.stringify(patch.retry_policy),
          // A raised limit releases a spent budget at the next admission (the publish below wakes claims).
          budget: patch.budget === undefined ? undefined : patch.budget && JSON.stringify(patch.budget),
          breaker_config: breaker === undefined ? undefined : breaker && JSON.stringify(breaker),
          updated_at: now,
        })
        .where('name', '=', name)
        .returningAll()
        .executeTakeFirst();
      if (!updated) throw new NotFound('agent', name);
      // As on creation: a push agent needs somewhere to push (the transaction undoes the patch).
      if (updated.delivery === 'push' && !updated.push_url)
        throw new BatonError('validation_error', "body.push_url: required when delivery is 'push'");
      const facts = await refreshFastPathFacts(tx, name);
      await appendAudit(tx, { at: now, actor, action: 'agent.update', subject: name, detail: { fields: Object.keys(patch) } });
      return { ...updated, ...facts };
    });
    this.store.publish('agent', name); // a raised cap may admit waiting work
    return row;
  }

  /** Cancels the agent's queued work, asks its running work to stop, removes the agent. History stays. */
  async deleteAgent(name: string, actor: string): Promise<{ cancelled: number; cancel_requested: number }> {
    const now = this.now();
    // A deep backlog first, in chunks of AGENT_DELETE_CHUNK, each its own transaction with a turn
    // of the event loop after it: on SQLite 20,000 queued rows cancelled in one transaction held the
    // server for 1.9 s (max_backlog allows 1,000,000). Its subscriptions go in the first, so these
    // cancellations start nothing; a group its cancelled members decide refuses a join on this
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
              .limit(AGENT_DELETE_CHUNK),
            'wait',
          )
          .execute();
        const cancelled = await cancelQueued(tx, queued, now, actor, 'agent_deleted');
        return { cancelled, followed: await this.follow(tx, now, actor, cancelled, undefined, name) };
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
        .lockRows(tx.selectFrom('executions').selectAll().where('agent', '=', name).where('status', '=', statusIs('queued')), 'wait')
        .execute();
      const cancelled = await cancelQueued(tx, queued, now, actor, 'agent_deleted');
      const running = await tx
        .selectFrom('executions')
        .select('id')
        .where('agent', '=', name)
        .where('status', '=', statusIs('running'))
        .execute();
      for (const r of running) await cancelExecution(tx, this.store, r.id, now, actor, 'agent_deleted');
      // Its subscriptions and its row go before what the cancellations cause: nothing chains from,
      // or onto, an agent being deleted, and a group its cancelled members decide finds no agent
      // for a join on it (join_refused agent_missing), instead of a task for an agent about to vanish.
      const subscriptions = unsubscribed + (await deleteAgentSubscriptions(tx, this.store, name));
      await tx.deleteFrom('agents').where('name', '=', name).execute();
      const followed = await this.follow(tx, now, actor, cancelled);
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
  async pauseAgent(name: string, reason: string, actor: string): Promise<{ agent: AgentRow; changed: boolean }> {
    const now = this.now();
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
  async resumeAgent(name: string, actor: string): Promise<{ agent: AgentRow; changed: boolean }> {
    const now = this.now();
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
  async closeAgentBreaker(name: string, actor: string): Promise<{ agent: AgentRow; changed: boolean }> {
    const now = this.now();
    const out = await this.store.transaction(async (tx) => {
      const exists = await tx.selectFrom('agents').select('name').where('name', '=', name).executeTakeFirst();
      if (!exists) throw new NotFound('agent', name);
      const changed = await closeBreaker(tx, this.store, name, now, actor, this.alertSinks);
      const agent = await tx.selectFrom('agents').selectAll().where('name', '=', name).executeTakeFirstOrThrow();
      return { agent, changed };
    });
    if (out.changed) this.store.publish('agent', name); // claimers and the dispatcher look again now
    return out;
  }

  /** Whether the agent is paused now (null: it admits, or it does not exist): what trigger answers say. */
  async agentPause(name: string): Promise<{ by: string; reason: string; since: number } | null> {
    const a = await this.store.db
      .selectFrom('agents')
      .select(['paused_at', 'paused_by', 'paused_reason'])
      .where('name', '=', name)
      .executeTakeFirst();
    if (!a || a.paused_at === null) return null;
    return { by: a.paused_by ?? 'unknown', reason: a.paused_reason ?? '', since: Number(a.paused_at) };
  }

  async getAgent(name: string): Promise<{ agent: AgentRow; running: number; queued: number }> {
    const agent = await this.store.db.selectFrom('agents').selectAll().where('name', '=', name).executeTakeFirst();
    if (!agent) throw new NotFound('agent', name);
    const counts = await liveCountsByAgent(this.store.db, [name]);
    return { agent, ...(counts.get(name) ?? { running: 0, queued: 0 }) };
  }

  /** NotFound unless the agent exists: a stream or filter that names an unknown agent is refused, not left empty. */
  async requireAgent(name: string): Promise<void> {
    await requireAgents(this.store.db, [name]);
  }

  /**
   * An agent's budget now: each limit with its current window's spending and when it resets
   * (GET /v1/agents/{agent}/budget). One primary-key read of the agent and one of the ledger.
   */
  async agentBudget(name: string): Promise<{ time_zone: string; limits: LimitStatus[] }> {
    const agent = await this.store.db.selectFrom('agents').select('budget').where('name', '=', name).executeTakeFirst();
    if (!agent) throw new NotFound('agent', name);
    const budget = parseBudget(agent.budget);
    if (!budget) return { time_zone: 'UTC', limits: [] };
    const now = this.now();
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
  async listAgents(page: {
    limit: number;
    after?: string;
    only?: string;
  }): Promise<Array<{ agent: AgentRow; running: number; queued: number }>> {
    let q = this.store.db.selectFrom('agents').selectAll().orderBy('name').limit(page.limit);
    if (page.after !== undefined) q = q.where('name', '>', page.after);
    if (page.only !== undefined) q = q.where('name', '=', page.only);
    const agents = await q.execute();
    const counts = await liveCountsByAgent(
      this.store.db,
      agents.map((a) => a.name),
    );
    return agents.map((agent) => ({ agent, ...(counts.get(agent.name) ?? { running: 0, queued: 0 }) }));
  }

  // ── executions ────────────────────────────────────────────────────────────

  /**
   * Create a queued execution, or refuse with BacklogFull / NotFound. The row exists before this
   * returns. `seen` hears whether the agent was paused, as the submit found it, before
   * `onCreated` runs (an answer that says so can then be stored with the row).
   */
  async submit(
    agentName: string,
    input: SubmitInput,
    actor: string,
    onCreated?: (tx: Tx, row: ExecutionRow) => Promise<void>,
    seen?: (agent: { paused: boolean }) => void,
  ): Promise<ExecutionRow> {
    const now = this.now();
    const audit = (id: string, trigger: string) => ({
      at: now,
      actor,
      action: 'execution.create',
      subject: agentName,
      execution_id: id,
      detail: { trigger },
    });
    if (!onCreated && this.plainSubmits) {
      // Nothing else to write with the row: one call with the plain submits asked for with it (create.ts).
      const f = this.submitFields(agentName, input);
      try {
        const auditDetail = auditRow(audit(f.id, f.trigger_kind)).detail;
        const { row, agentPaused } = await this.plainSubmits.run({ id: f.id, f, now, actor, auditDetail });
        announce(this.store, [row]);
        seen?.({ paused: agentPaused });
        return row;
      } catch (err) {
        if (err instanceof BacklogFull)
          await this.store.db
            .insertInto('audit_log')
            .values(auditRow(refusal(now, actor, agentName)))
            .execute();
        throw err;
      }
    }
    const out = await this.store.transaction(async (tx) => {
      // Creators of work for this agent take turns, so the backlog read in createExecutions is
      // exact; claims only ever shorten the backlog, so a submit never waits for them.
      const [agent] = await lockAgentsForNewWork(tx, this.store, [agentName]);
      if (!agent) throw new NotFound('agent', agentName);
      seen?.({ paused: agent.paused_at !== null });
      const row = await createExecutions(tx, this.store, {
        backlog: 'check',
        agent,
        row: queuedValues(this.newRow(agent, input), now, actor),
        audit: { each: (r) => audit(r.id, r.trigger_kind) },
      });
      if (!row) {
        // The refusal is audited and committed; the caller gets the error after the commit.
        await appendAudit(tx, refusal(now, actor, agentName));
        return { refused: agent.max_backlog, row: undefined };
      }
      await onCreated?.(tx, row); // e.g. the idempotent answer, stored with the row
      return { row, refused: undefined };
    });
    if (!out.row) throw new BacklogFull(agentName, out.refused!);
    announce(this.store, [out.row]);
    return out.row;
  }

  /**
   * Create up to BATCH.maxItems executions for one agent in one transaction, answering per item
   * (src/engine/submit-many.ts): created, replayed (a key used before: its first answer) or
   * refused (backlog_full past the room; a key reused or in flight). NotFound for an unknown
   * agent and a validation_error for a bad batch (too many items, a key given twice) refuse it
   * whole. Keys are scoped to the agent, as the Idempotency-Key header of a single submit is.
   */
  async submitMany(
    agentName: string,
    items: readonly SubmitManyItem[],
    actor: string,
    opts: SubmitManyOptions = {},
  ): Promise<BatchOutcome[]> {
    if (items.length > BATCH.maxItems)
      throw new BatonError('validation_error', `body.items: at most ${BATCH.maxItems} items (got ${items.length})`);
    const seen = new Map<string, number>();
    items.forEach((item, i) => {
      if (!item.idem) return;
      const first = seen.get(item.idem.key);
      if (first !== undefined) {
        throw new BatonError('validation_error', `body.items.${i}.idempotency_key: repeats body.items.${first}'s ('${item.idem.key}')`);
      }
      seen.set(item.idem.key, i);
    });
    if (items.length === 0) return [];
    const scope = `agent:${agentName}`;
    for (let attempt = 1; ; attempt++) {
      const now = this.now();
      try {
        const out = await this.store.transaction((tx) =>
          submitBatch(
            tx,
            this.store,
            agentName,
            (agent) =>
              items.map((item) => ({
                row: this.newRow(agent, item.idem ? { ...item, idempotency_key: item.idem.key } : item),
                idem: item.idem && { scope, ...item.idem },
              })),
            { now, actor, ttlMs: opts.ttlMs ?? IDEMPOTENCY.ttlMs, answerFor: opts.answerFor },
          ),
        );
        announce(
          this.store,
          out.flatMap((o) => (o.kind === 'created' ? [{ id: o.id, agent: agentName, status: o.status }] : [])),
        );
        return out;
      } catch (err) {
        // A header key claimed between this batch's read and write: read again (it now replays or waits).
        if (!(err instanceof KeyRace)) throw err;
        if (attempt >= 3)
          throw new BatonError('idempotency_in_flight', `body.items: idempotency keys ${err.keys.join(', ')} are in flight; retry later`);
      }
    }
  }

  /**
   * Follow rows that just reached their final state in `tx` (composition/follow.ts): the chained
   * tasks and group progress they cause commit with them. Announce what it returns after the commit.
   */
  follow(
    tx: Tx,
    now: number,
    actor: string,
    rows: readonly ExecutionRow[],
    unsubscribed?: ReadonlySet<string>,
    deleting?: string,
  ): Promise<Followed> {
    if (rows.length === 0) return Promise.resolve({ created: [], ended: [] });
    const ctx = {
      store: this.store,
      now,
      actor,
      alertSinks: this.alertSinks,
      chainDepthLimit: this.chainDepthLimit,
      unsubscribed,
      deleting,
    };
    return followFinals(tx, ctx, rows);
  }

  /** A new row's own fields, before the agent's contract defaults (newRow adds them). */
  private submitFields(agent: string, input: SubmitInput): SubmitFields {
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
    };
  }

  private newRow(agent: AgentRow, input: SubmitInput): NewQueued {
    const f = this.submitFields(agent.name, input);
    return Object.assign(f, {
      max_redeliveries: agent.max_redeliveries,
      timeout_seconds: agent.timeout_seconds,
      lease_ttl_seconds: agent.lease_ttl_seconds,
      retry_policy: f.retry_policy ?? agent.retry_policy,
    });
  }

  /**
   * Admit up to `max` queued executions of `agent` to the caller, waiting up to `waitMs` for
   * work to become admissible. Returns [] when nothing came.
   */
  async claim(agent: string, opts: ClaimOptions): Promise<ExecutionRow[]> {
    const max = opts.max ?? 1;
    const admitOpts: AdmitOptions = { now: 0, owner: opts.owner, max, delivery: opts.delivery ?? 'pull' };
    // No wait: one look at the queue. No waiter is armed, so none takes a wake-up meant for a
    // claimer that does wait (wake() wakes one), and no abort plumbing is built.
    if ((opts.waitMs ?? 0) <= 0) return this.admitOnce(agent, admitOpts);
    const deadline = Date.now() + (opts.waitMs ?? 0);
    const local = new AbortController();
    const signal = local.signal;
    const onAbort = () => local.abort();
    if (opts.signal?.aborted || this.closed) local.abort();
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    this.activeClaims.add(local);
    try {
      return await this.claimLoop(agent, admitOpts, deadline, signal);
    } finally {
      this.activeClaims.delete(local);
      opts.signal?.removeEventListener('abort', onAbort);
    }
  }

  /** One admission for `agent`, announced: the rows it leased (none when nothing was admissible). */
  private async admitOnce(agent: string, admitOpts: AdmitOptions): Promise<ExecutionRow[]> {
    const opts = { ...admitOpts, now: this.now(), alertSinks: this.alertSinks };
    const rows =
      (await this.plainClaims?.run({ id: agent, ...opts })) ?? (await this.store.transaction((tx) => admit(tx, this.store, agent, opts)));
    if (rows.length > 0) {
      announce(this.store, rows);
      this.events.emit('execution:admitted', rows);
    }
    return rows;
  }

  private async claimLoop(agent: string, admitOpts: AdmitOptions, deadline: number, signal: AbortSignal): Promise<ExecutionRow[]> {
    for (;;) {
      const waiter = this.waiters.arm(agent, signal);
      try {
        const rows = await this.admitOnce(agent, admitOpts);
        if (rows.length > 0) return rows;
        const remaining = deadline - Date.now();
        if (remaining <= 0 || signal.aborted) return [];
        await waiter.wait(Math.min(remaining, this.claimPollMs));
      } finally {
        waiter.disarm();
      }
    }
  }

  /** Renew a lease. Says whether cancellation was requested. */
  async heartbeat(id: string, token: string): Promise<Renewed> {
    const now = this.now();
    // One statement: alone where the store has fast paths (one round trip), else in a
    // transaction, which SQLite commits together with the writes around it (group commit).
    const fast = this.store.fastPaths;
    const { agent, lapse_held, ...renewed } = fast
      ? await fast.alone((db) => renewLease(db, id, token, now))
      : await this.store.transaction((tx) => renewLease(tx, id, token, now));
    // A heartbeat is a worker of the agent seen again: it ends a shared-cause lapse hold (pull
    // agents only; a push agent's heartbeats come from Baton's dispatcher, its hold times out).
    // The transaction runs only when a hold is set.
    if (lapse_held && (await this.store.transaction((tx) => clearLapseHold(tx, agent, now, `heartbeat:${id}`, 'heartbeat')))) {
      this.store.publish('agent', agent);
    }
    return renewed;
  }

  async complete(id: string, token: string, given: Outcome, actor: string): Promise<ExecutionRow> {
    const now = this.now();
    // Whatever client reported it, a recognisable secret is never stored (canary G-04).
    const outcome: StoredOutcome = {
      status: given.status,
      result:
        given.result === undefined
          ? null
          : given.result instanceof RawJson
            ? redactJsonText(given.result.text)
            : redactToJson(given.result),
      error: given.error
        ? { code: given.error.code && redactSecrets(given.error.code), message: redactSecrets(given.error.message) }
        : null,
      usage: given.usage === undefined ? null : redactToJson(given.usage),
    };
    // A completion that causes nothing else is one statement, shared with the others of its turn
    // (store.fastPaths; which outcomes may: src/domain/fast-paths.ts).
    const alone = outcomeMayCompleteFast(outcome)
      ? await this.loneCompletions?.run(completionRequest(id, token, outcome, now, actor))
      : undefined;
    if (alone) {
      announce(this.store, [alone]);
      this.events.emit('execution:completed', alone);
      return alone;
    }
    // The completion commits with what it causes: its budget spending, its breaker count, the
    // retry its policy asks for (a crash loses neither the failure nor its retry), and the work
    // its final outcome starts. One read of the agent tells which of those need more statements.
    // A long result is written off the event loop where the store can (SQLite's writer thread).
    const commit = async (tx: Tx) => {
      const done = await completeWithLease(tx, id, token, outcome, now, actor);
      const agent = await readCompletionProfile(tx, done.agent);
      await accrueBudget(tx, done, now, this.alertSinks, agent ? agent.budget : null);
      await countTowardBreakers(tx, this.store, [done], now, actor, this.alertSinks, agent && new Map([[done.agent, agent]]));
      const retry = done.status === 'failed' ? await insertRetry(tx, this.store, done, now, actor) : undefined;
      // With a retry to come the failure is not final: the retry's outcome is followed instead.
      const unsubscribed = agent?.subscribed ? undefined : new Set([done.agent]);
      return { row: done, retry, followed: await this.follow(tx, now, actor, retry ? [] : [done], unsubscribed) };
    };
    const large = (outcome.result?.length ?? 0) > LARGE_JSON_CHARS;
    const { row, retry, followed } = await (large && this.store.offLoopTransaction
      ? this.store.offLoopTransaction(commit)
      : this.store.transaction(commit));
    announce(this.store, [row, ...(retry ? [retry] : []), ...followed.created, ...followed.ended]);
    this.events.emit('execution:completed', row);
    return row;
  }

  async release(id: string, token: string, actor: string): Promise<ExecutionRow> {
    const now = this.now();
    const fast = this.store.fastPaths;
    const alone = fast ? await fast.alone((db) => releaseAlone(db, id, token, now, actor)) : undefined;
    if (alone) {
      announce(this.store, [alone]);
      return alone;
    }
    const { row, followed } = await this.store.transaction(async (tx) => {
      const r = await releaseLease(tx, this.store, id, token, now, actor);
      return { row: r, followed: await this.follow(tx, now, actor, r.status === 'cancelled' ? [r] : []) };
    });
    announce(this.store, [row, ...followed.created, ...followed.ended]);
    return row;
  }

  async cancel(id: string, actor: string): Promise<ExecutionRow> {
    const now = this.now();
    const { row, followed } = await this.store.transaction(async (tx) => {
      const before = await lockExecution(tx, this.store, id);
      const r = await cancelExecution(tx, this.store, id, now, actor, 'cancelled_by_user');
      await appendAudit(tx, {
        at: now,
        actor,
        action: 'execution.cancel',
        subject: r.agent,
        execution_id: id,
        detail: { status: r.status },
      });
      // Cancelled now (it was queued) is final; a running one ends when its worker stops.
      return { row: r, followed: await this.follow(tx, now, actor, before.status === 'queued' ? [r] : []) };
    });
    announce(this.store, [row, ...followed.created, ...followed.ended]);
    return row;
  }

  /** Retry a failed execution by hand: a new queued run with `retry_of` set (see manual-retry.ts). */
  async retryFailed(id: string, actor: string): Promise<ExecutionRow> {
    const now = this.now();
    const row = await this.store.transaction((tx) => retryFailedExecution(tx, this.store, id, now, actor));
    announce(this.store, [row]);
    return row;
  }

  async getExecution(id: string) {
    const execution = await this.store.db.selectFrom('executions').selectAll().where('id', '=', id).executeTakeFirst();
    if (!execution) throw new NotFound('execution', id);
    const events = await this.store.db.selectFrom('execution_events').selectAll().where('execution_id', '=', id).orderBy('id').execute();
    // The retry chain, from any member: its first run and every retry of it.
    const root = execution.retry_root ?? execution.id;
    const chain = await this.store.db
      .selectFrom('executions')
      .select('id')
      .where((eb) => eb.or([eb('id', '=', root), eb('retry_root', '=', root)]))
      .orderBy('retry_number')
      .execute();
    // What its final outcome started through subscriptions (chain_links: primary key seek on source_id).
    const started = await this.store.db
      .selectFrom('chain_links')
      .select(['subscription_id', 'execution_id', 'refused', 'at'])
      .where('source_id', '=', id)
      .orderBy('subscription_id')
      .execute();
    return { execution, events, chain: chain.map((c) => c.id), waiting: await this.waiting(execution), started };
  }

  /** Why a queued execution is not running (null when it is not queued): see waiting.ts. */
  async waiting(execution: ExecutionRow): Promise<WaitingView | null> {
    if (execution.status !== 'queued') return null;
    const agent = await this.store.db.selectFrom('agents').selectAll().where('name', '=', execution.agent).executeTakeFirst();
    return waitingFor(this.store.db, execution, agent, this.now(), this.backlogExpiryMs);
  }

  /** The execution's agent and status, or undefined when it does not exist: what access checks read. */
  executionHead(id: string): Promise<{ agent: string; status: ExecutionStatus } | undefined> {
    return this.store.db.selectFrom('executions').select(['agent', 'status']).where('id', '=', id).executeTakeFirst();
  }

  /**
   * A page of list rows, newest first: bodies cut to previews (see list-executions.ts). On the
   * reader: cutting previews from multi-MiB results still reads them inside SQLite (60 results
   * of 3.9 MiB: ~110 ms), which must not hold the event loop on SQLite.
   */
  listExecutions(f: ExecutionFilter): Promise<ExecutionListRow[]> {
    return listExecutions(this.store.reader, f, this.store.createdOrderIndexes);
  }

  /**
   * An agent's completions, failures, duration percentiles, queue depth and seats in use over a
   * window, in buckets (see agent-activity.ts): capped seeks, on the reader like the lists.
   */
  async agentSeries(agent: string, window: ActivityWindow): Promise<AgentSeries & { max_parallel: number }> {
    const max_parallel = await this.seatCap(agent);
    return { ...(await readAgentSeries(this.store.reader, agent, window, this.now())), max_parallel };
  }

  /** Which run held which of an agent's seats when over a window, and what waits now. */
  async agentSeats(agent: string, window: ActivityWindow): Promise<AgentSeats & { max_parallel: number }> {
    const max_parallel = await this.seatCap(agent);
    return { ...(await readAgentSeats(this.store.reader, agent, window, this.now())), max_parallel };
  }

  /** The agent's max_parallel, or NotFound. */
  private async seatCap(name: string): Promise<number> {
    const found = await this.store.db.selectFrom('agents').select('max_parallel').where('name', '=', name).executeTakeFirst();
    if (!found) throw new NotFound('agent', name);
    return found.max_parallel;
  }

  /**
   * One reaper pass: re-queue or park lapsed leases, fail timed-out and stale-queued rows,
   * force overdue cancellations. Safe to run in every process at once.
   */
  async reapOnce(): Promise<Reaped[]> {
    const all: Reaped[] = [];
    for (;;) {
      const now = this.now();
      const actor = `reaper:${this.nodeId}`;
      const { batch, followed } = await this.store.transaction(async (tx) => {
        const { reaped, finals } = await expireOnce(tx, this.store, {
          now,
          actor,
          cancelGraceMs: this.cancelGraceMs,
          backlogExpiryMs: this.backlogExpiryMs,
          batch: this.reapBatch,
          alertSinks: this.alertSinks,
        });
        return { batch: reaped, followed: await this.follow(tx, now, actor, finals) };
      });
      all.push(...batch);
      announce(this.store, [...batch.map((r) => ({ id: r.id, agent: r.agent, status: r.to })), ...followed.created, ...followed.ended]);
      if (batch.length < this.reapBatch) break;
    }
    if (all.length > 0) this.events.emit('reaper:reaped', all);
    return all;
  }
}

export type { Outcome, CompletionStatus };

/** The audit entry of a submit refused for a full backlog. */
function refusal(at: number, actor: string, agent: string) {
  return { at, actor, action: 'execution.refused', subject: agent, detail: { error: 'backlog_full' } };
}
