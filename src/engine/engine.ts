import { BacklogFull, NotFound } from '../domain/errors.ts';
import type { CompletionStatus, ExecutionStatus } from '../domain/states.ts';
import type { Outcome, Reaped } from '../domain/outcomes.ts';
import { NO_SECRET_BOX, type SecretBox } from '../domain/secret-box.ts';
import { DEFAULTS, defaultNodeId } from '../config.ts';
import type { StoreAdapter, StoreKind, Tx } from '../store/adapter.ts';
import type { Topic } from '../store/signals.ts';
import type { ExecutionRow } from '../store/schema.ts';
import { lockAgentsForNewWork } from './agent-lock.ts';
import { announce, parseAnnouncement } from './announce.ts';
import { appendAudit, auditRow } from './audit.ts';
import { readExecutionDetail } from './execution-detail.ts';
import type { AlertSinkKind } from '../domain/canary.ts';
import { retryFailedExecution } from './manual-retry.ts';
import { listExecutions, type ExecutionFilter, type ExecutionListRow } from './list-executions.ts';
import { Logs } from './logs.ts';
import { LARGE_JSON_CHARS } from '../domain/json.ts';
import { redactOutcome } from '../domain/redact.ts';
import { EngineEvents } from './events.ts';
import { admit, type AdmitOptions } from './transitions/admit.ts';
import { cancelExecution } from './transitions/cancel.ts';
import { completionRequest } from './transitions/complete.ts';
import { commitCompletion, gatheredCompletions } from './completion-commit.ts';
import { createExecutions, queuedValues } from './transitions/create.ts';
import { outcomeMayCompleteFast } from '../domain/fast-paths.ts';
import { reapOnce } from './reap.ts';
import { lockExecution } from './transitions/lease.ts';
import { followFinals, type Followed } from './composition/follow.ts';
import { releaseAlone, releaseLease } from './transitions/release.ts';
import { renewLease, type Renewed } from './transitions/renew.ts';
import { clearLapseHold } from './transitions/lapse.ts';
import { Pools } from './pool-service.ts';
import type { FlowReport } from './pools.ts';
import { Idempotency } from './triggers/idempotency.ts';
import { keyedSubmit } from './flow-submit.ts';
import { submitMany, type BatchOutcome, type SubmitManyItem, type SubmitManyOptions } from './submit-many.ts';
import { newRow, refusal, submitFields, type SubmitInput } from './submit-input.ts';
import { Schedules } from './triggers/schedules.ts';
import { Webhooks } from './triggers/webhooks.ts';
import { Subscriptions } from './composition/subscriptions.ts';
import { ClaimWaits, type ClaimHint, type Handoff } from './waiters.ts';
import { reportTo, type ClaimAnyItem } from './claim-any.ts';
import { claimAny, type ClaimAnyOptions } from './claim-any-engine.ts';
import { plainCalls, type PlainCalls } from './plain-calls.ts';
import { atSend } from './admissions.ts';
import { Groups } from './composition/group-service.ts';
import { Agents } from './agents.ts';
import { StoreSpace } from './store-space.ts';
import type { ClaimOptions, EngineOptions } from './engine-options.ts';

export type {
  BatchOutcome,
  ClaimOptions,
  EngineOptions,
  ExecutionFilter,
  ExecutionListRow,
  SubmitInput,
  SubmitManyItem,
  SubmitManyOptions,
};

export class Engine {
  readonly store: StoreAdapter;
  readonly events = new EngineEvents();
  readonly nodeId: string;
  readonly cancelGraceMs: number;
  readonly backlogExpiryMs: number;
  private readonly clock: () => number;
  /** Rows one reaper pass handles per transaction. */
  readonly reapBatch: number;
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
  /** Agents: create, change, pause, resume, delete, read (agents.ts). */
  readonly agents: Agents;
  /** Pools: limits several agents draw from (pool-service.ts). */
  readonly pools: Pools;
  /** Whether the store's disk is full (GET /readyz, metrics): failed writes set it, a probe write clears it. */
  readonly space: StoreSpace;
  /** Long-poll claims waiting for work; close() wakes them all so shutdown does not wait for them. */
  private readonly claimWaits: ClaimWaits;
  /** Plain submits, claims and completions that cause nothing else, many to a call (store.fastPaths; plain-calls.ts). */
  private readonly plain: PlainCalls | undefined;
  /** Completions that take a transaction, those asked for together in one (completion-commit.ts). */
  private readonly completions = gatheredCompletions(this);
  private readonly unsubscribe: () => void;

  constructor(opts: EngineOptions) {
    this.store = opts.store;
    this.clock = opts.clock ?? (() => this.store.now());
    this.nodeId = opts.nodeId ?? defaultNodeId();
    this.cancelGraceMs = opts.cancelGraceMs ?? DEFAULTS.cancelGraceMs;
    this.backlogExpiryMs = opts.backlogExpiryMs ?? DEFAULTS.backlogExpiryMs;
    this.reapBatch = opts.reapBatch ?? 100;
    this.claimWaits = new ClaimWaits(opts.claimPollMs ?? DEFAULTS.claimPollMs, () => this.now());
    this.alertSinks = opts.alertSinks ?? [];
    this.chainDepthLimit = opts.chainDepthLimit ?? DEFAULTS.chainDepthLimit;
    this.secrets = opts.secrets ?? NO_SECRET_BOX;
    this.space = new StoreSpace(this.store, this.events, this.nodeId, this.clock);
    const fast = this.store.fastPaths;
    this.plain = fast && plainCalls(this.store, fast, this.claimWaits, () => this.now());
    // Sub-services see the engine only as their context (store, clock): built once, here.
    this.schedules = new Schedules(this);
    this.webhooks = new Webhooks(this, this.schedules);
    this.logs = new Logs(this);
    this.idempotency = new Idempotency(this);
    this.subscriptions = new Subscriptions(this);
    this.groups = new Groups(this);
    this.agents = new Agents(this);
    this.pools = new Pools(this);
    // One path for every status change, local or from another process: wake claimers of that
    // agent when work was queued or a seat freed, and tell in-process listeners (SSE, metrics).
    const offExecution = this.store.subscribe('execution', (message, local) => {
      const { agent, ids, status } = parseAnnouncement(message);
      if (status !== 'running') this.claimWaits.seatFreed(agent, ids, status === 'queued', local);
      for (const id of ids) this.events.emit('execution:changed', { id, agent, status, local });
    });
    const offAgent = this.store.subscribe('agent', (agent) => this.claimWaits.wake(agent, true));
    this.unsubscribe = () => {
      offExecution();
      offAgent();
    };
  }

  now(): number {
    return this.clock();
  }

  close(): void {
    this.claimWaits.close();
    this.unsubscribe();
  }

  /** Listen to a store signal (`key`: a key was revoked; `agent`: an agent changed), from any process. Returns the unsubscribe. */
  subscribe(topic: Topic, listener: (message: string) => void): () => void {
    return this.store.subscribe(topic, listener);
  }
  /** Tell every process (this one too) a store signal: `claim`, a withdrawal (src/api/parked-claims.ts). */
  publish = (topic: Topic, message: string): void => this.store.publish(topic, message);

  /**
   * The store's kind, whether every known migration is applied, and since when its disk has been
   * full (undefined: writes succeed; probed while full). GET /readyz. Rejects when the store does not answer.
   */
  async storeStatus(): Promise<{ kind: StoreKind; migrated: boolean; fullSince?: number }> {
    const { applied, known } = await this.store.migrationStatus();
    await this.space.probe();
    return { kind: this.store.describe().kind, migrated: known.every((v) => applied.includes(v)), fullSince: this.space.fullSince };
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
    seen?: (agent: { paused: boolean; debounced?: boolean }) => void,
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
    if (!onCreated && this.plain && (!input.key || (!input.debounce_seconds && !input.singleton))) {
      // Nothing else to write with the row: one call with the plain submits asked for with it (create.ts);
      // a keyed row takes its round in that call. A debounce or singleton is decided below (flow-submit.ts).
      const f = submitFields(agentName, input);
      try {
        const auditDetail = auditRow(audit(f.id, f.trigger_kind)).detail;
        const { row, agentPaused, after } = await this.plain.submits.run({ id: f.id, f, now, actor, auditDetail });
        try {
          announce(this.store, [row]);
        } finally {
          after?.(); // a claim its call admitted the row to gets its answer now
        }
        seen?.({ paused: agentPaused });
        return this.claimWaits.answerAfter(row);
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
      // A key's debounce folds the submit into its task; a singleton key refuses (flow-submit.ts).
      const keyed = await keyedSubmit(this.store, tx, agentName, input, now, actor);
      seen?.({ paused: agent.paused_at !== null, debounced: keyed.folded !== undefined });
      const row =
        keyed.folded ??
        (await createExecutions(tx, this.store, {
          backlog: 'check',
          agent,
          row: queuedValues(newRow(agent, keyed.input), now, actor),
          audit: { each: (r) => audit(r.id, r.trigger_kind) },
        }));
      if (!row) {
        // The refusal is audited and committed; the caller gets the error after the commit.
        await appendAudit(tx, refusal(now, actor, agentName));
        return { refused: agent.max_backlog, row: undefined };
      }
      await onCreated?.(tx, row); // e.g. the idempotent answer, stored with the row
      // A claimer parked on the agent admits it in this commit where the store shares commits.
      if (row.status === 'queued' && !keyed.folded) this.store.shareCommit?.(tx, () => this.claimWaits.wakeBeforeCommit(agentName, row.id));
      return { row, refused: undefined };
    });
    if (!out.row) throw new BacklogFull(agentName, out.refused!);
    announce(this.store, [out.row]);
    return this.claimWaits.answerAfter(out.row);
  }

  /** Many submits to one agent in one transaction, answered per item: see submitMany in submit-many.ts. */
  submitMany(agentName: string, items: readonly SubmitManyItem[], actor: string, opts: SubmitManyOptions = {}): Promise<BatchOutcome[]> {
    return submitMany(this, agentName, items, actor, opts);
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

  /** Admit up to `max` queued executions of `agent`, waiting up to `waitMs` for work to become admissible ([]: none came). */
  async claim(agent: string, opts: ClaimOptions): Promise<ExecutionRow[]> {
    const max = opts.max ?? 1;
    const admitOpts: AdmitOptions = { now: 0, owner: opts.owner, max, delivery: opts.delivery ?? 'pull', keyId: opts.keyId };
    // No wait: one look at the queue. No waiter is armed, so none takes a wake-up meant for a
    // claimer that does wait (wake() wakes one), and no abort plumbing is built. A look that finds
    // no queued row marks the agent idle (ClaimWaits.markIfEmpty).
    if ((opts.waitMs ?? 0) <= 0) {
      const onFlow: FlowReport = (f) => f.pools && this.claimWaits.notePools(agent, f.pools);
      return this.admitOnce(agent, Object.assign({}, admitOpts, { onFlow, onNothingQueued: this.claimWaits.markIfEmpty(agent) }));
    }
    // Parked, it may be taken by a submit of its agent, which admits it in its own call (plain-calls.ts).
    const { owner, delivery, keyId } = admitOpts;
    const handoff: Handoff | undefined = this.plain && {
      request: { owner, max, delivery, keyId },
      admitted: (rows) => this.admitted(rows),
      giveBack: (rows) => this.giveBack(rows, owner),
    };
    const admit = (hint: ClaimHint) => this.admitOnce(agent, Object.assign({}, admitOpts, reportTo(hint)));
    return this.claimWaits.wait(agent, opts.waitMs ?? 0, opts.signal, admit, handoff);
  }

  /** Admit queued executions of any of `items`' agents, each up to its `max`, waiting up to `waitMs` for one to have work (claim-any.ts). */
  claimAny(items: readonly ClaimAnyItem[], opts: ClaimAnyOptions): Promise<ExecutionRow[]> {
    const admitted = this.plain && ((rows: ExecutionRow[]) => this.admitted(rows));
    const giveBack = (r: readonly ExecutionRow[], o: string) => this.giveBack(r, o);
    const emptyLooks = this.plain?.emptyLooks;
    return claimAny({ waits: this.claimWaits, admitOnce: (a, o) => this.admitOnce(a, o), admitted, giveBack, emptyLooks }, items, opts);
  }

  /** The long-poll re-check (ClaimWaits.pollOnce), every `claimPollMs` while claims wait; tests call it directly. */
  pollWaitingClaims(): void {
    this.claimWaits.pollOnce();
  }

  /** One admission for `agent`, announced: the rows it leased (none when nothing was admissible). */
  private async admitOnce(agent: string, admitOpts: AdmitOptions): Promise<ExecutionRow[]> {
    let turns: string[] = [];
    const onFlow: FlowReport = (f) => {
      if (f.turns) turns = f.turns;
      admitOpts.onFlow?.(f);
    };
    const opts = Object.assign({}, admitOpts, { now: this.now(), alertSinks: this.alertSinks, onFlow }); // not a spread: see create.ts queuedValues
    const plain = this.plain;
    const rows = plain
      ? ((plain.admissions.transactional(agent) ? undefined : await plain.claims.run({ id: agent, ...opts })) ??
        (await plain.admissions.run({ id: agent, opts })))
      : await this.store.transaction((tx) => admit(tx, this.store, agent, atSend(opts, this.clock)));
    // A free pool seat is held for other members' turns: their claimers (in whatever process) look now.
    for (const t of turns) this.store.publish('agent', t);
    if (rows.length > 0) this.admitted(rows);
    return rows;
  }

  /** Rows just leased to a claimer, told to every process and to in-process listeners. */
  private admitted(rows: ExecutionRow[]): void {
    this.completions.leased(rows);
    announce(this.store, rows);
    this.events.emit('execution:admitted', rows);
  }

  /** Rows leased to a claimer that left before its answer: back to the queue (release), each on its own. */
  private async giveBack(rows: readonly ExecutionRow[], owner: string): Promise<void> {
    await Promise.all(rows.map((r) => this.release(r.id, r.lease_token!, owner).catch(() => undefined)));
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
    const outcome = redactOutcome(given);
    // A completion that causes nothing else is one statement, shared with the others of its turn
    // (store.fastPaths; which outcomes may: src/domain/fast-paths.ts).
    const alone = outcomeMayCompleteFast(outcome)
      ? await this.plain?.completions.run(completionRequest(id, token, outcome, now, actor))
      : undefined;
    if (alone) {
      announce(this.store, [alone]);
      this.events.emit('execution:completed', alone);
      return alone;
    }
    // The completion commits with what it causes (completion-commit.ts); those asked for together
    // share one transaction. A long result is written off the event loop where the store can
    // (SQLite's writer thread).
    const job = { id, token, outcome, now, actor };
    const large = (outcome.result?.length ?? 0) > LARGE_JSON_CHARS;
    const { row, retry, followed } = await (large && this.store.offLoopTransaction
      ? this.store.offLoopTransaction((tx) => commitCompletion(tx, this, job))
      : this.completions.run(job));
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

  /** An execution with its events, its retry chain, why it waits and what it started: see execution-detail.ts. */
  getExecution(id: string) {
    return readExecutionDetail(this, id);
  }

  /** The execution's agent and status, or undefined when it does not exist: what access checks read. */
  executionHead(id: string): Promise<{ agent: string; status: ExecutionStatus } | undefined> {
    return this.store.db.selectFrom('executions').select(['agent', 'status']).where('id', '=', id).executeTakeFirst();
  }

  /**
   * A page of list rows, newest first: bodies cut to previews (see list-executions.ts). On the
   * reader: cutting previews from multi-MiB results still reads them inside SQLite (a page of
   * them is a long step), which must not hold the event loop on SQLite.
   */
  listExecutions(f: ExecutionFilter): Promise<ExecutionListRow[]> {
    return listExecutions(this.store.reader, f, this.store.createdOrderIndexes);
  }

  /** One reaper pass (reap.ts): lapsed leases, timeouts, stale queued rows, overdue cancellations. */
  reapOnce(): Promise<Reaped[]> {
    return reapOnce(this);
  }
}

export type { Outcome, CompletionStatus };
