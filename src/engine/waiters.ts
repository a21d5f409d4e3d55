import type { ExecutionRow } from '../store/schema.ts';
import { addRecent } from './bounded.ts';
import { IdleAgents } from './idle-agents.ts';
import { Waiters, type ParkedRequest, type TakenClaim, type Wake } from './waiter-set.ts';

/**
 * Executions remembered as served (ClaimWaits.served) at most: far more than the submits a process
 * has in flight at once, so what is dropped is only what a failed commit left behind.
 */
const SERVED_BOUND = 1_000;

export type { ParkedRequest, TakenClaim, Wake };

/** What a waiting claim offers to a submit of its agent (ClaimWaits.wait). */
export interface Handoff {
  request: ParkedRequest;
  /** Rows taken for it reached it: announce them (as an admission of its own is announced). */
  admitted(rows: ExecutionRow[]): void;
  /** Its caller left while the call that took them was out: put them back in the queue. */
  giveBack(rows: ExecutionRow[]): Promise<void>;
}

/**
 * Claims that wait for work (long-poll): each looks again when its agent is signalled, until it
 * gets rows, its wait is over, its signal aborts, or close() ends them all.
 *
 * Signals say when work may be admissible; the poll covers what no signal announces here: a
 * signal from another process lost while its LISTEN reconnected, a `run_after` coming due, a
 * hold lapsing, a lease reaped elsewhere. Every `pollMs` one waiting claimer *per agent* looks
 * again (pollOnce), not every claimer: idle claimers cost one admission per agent per poll, however
 * many are parked. One that the poll (or a throttle's reopening) woke and that finds rows wakes
 * the next claimer of its agent, which does the same, so a backlog the poll finds drains at once.
 * One woken for work just queued that takes other rows wakes the next claimer for that work (passOn).
 */
export class ClaimWaits {
  /** Armed waiters per agent (a claim on several agents arms its own: claim-any.ts). */
  readonly waiters = new Waiters();
  /** Waiting long-poll claims; close() wakes them all so shutdown does not wait for them. */
  private readonly activeClaims = new Set<AbortController>();
  private closed = false;
  /** Calls pollOnce every pollMs while any claim waits. */
  private ticker: ReturnType<typeof setInterval> | undefined;
  /** Per agent, the one timer at the earliest moment a closed throttle of it reopens. */
  private readonly reopens = new Map<string, { at: number; timer: ReturnType<typeof setTimeout> }>();

  /** Agents known to have nothing queued, for claims on many agents (IdleAgents). */
  readonly idle: IdleAgents;

  constructor(
    private readonly pollMs: number,
    /** The engine's clock, the one admission's reopening times are on. */
    readonly now: () => number,
  ) {
    this.idle = new IdleAgents(pollMs);
  }

  /**
   * For a look at `agent` about to begin outside a claim on many agents (a claim that does not
   * wait: a completion's claim, complete-and-claim): its admission's onNothingQueued, marking the
   * agent idle as a look of a claim on many agents does (IdleAgents, the same rules: a change since
   * this call voids it). A completion's claim finds that for most tasks in W1-users, and a claim
   * on many agents widened with the agent right after (POST /v1/claim/widen) then watches it
   * without an admission of its own.
   */
  markIfEmpty(agent: string): () => void {
    const seen = this.idle.seen(agent);
    return () => this.idle.mark(agent, seen);
  }

  /** See Waiters.wake. */
  wake(agent: string, everyone = false): void {
    this.idle.changed(agent);
    this.waiters.wake(agent, everyone);
  }

  /**
   * Executions whose claimer was woken before their commit (wakeBeforeCommit), or that a claim
   * taken by their submit holds already (served): the announcement after the commit wakes nobody
   * more for them. Bounded (SERVED_BOUND): an entry stays only when the commit failed (no
   * announcement came); the oldest go first, and one dropped costs at most an extra look.
   */
  private readonly wokenEarly = new Set<string>();
  /** Executions a claim was woken for or holds (served) whose submit has not answered yet (answerAfter). */
  private readonly answerFirst = new Set<string>();

  /**
   * `id` was just queued for `agent` in a transaction that has not committed yet, and claims that
   * start now join its commit (StoreAdapter.shareCommit): wake one claimer of the agent now, so
   * its admission runs in that same commit rather than in a transaction of its own after it.
   */
  wakeBeforeCommit(agent: string, id: string): void {
    this.idle.changed(agent);
    if (this.waiters.wake(agent, false, 'signal', [id])) this.served(id);
  }

  /**
   * Take one claim parked on `agent` (its caller still there), for a submit to run in its own call
   * and commit (FastPaths.submitClaim); undefined when none is parked or offers itself. The claimer
   * waits for `settle`, whatever happens to its caller meanwhile.
   */
  takeParked(agent: string): TakenClaim | undefined {
    return this.waiters.take(agent);
  }

  /** `id`'s claimer has it, or is woken for it, before its queued state is announced: that announcement wakes nobody here. */
  served(id: string): void {
    addRecent(this.wokenEarly, id, SERVED_BOUND);
    addRecent(this.answerFirst, id, SERVED_BOUND);
  }

  /**
   * `row`, for its submit's answer, once its commit and announcement are done: at once, or, when a
   * claim was woken for it or was handed it (served), after the promise continuations already
   * queued have run. That claim's answer, which a worker waits on to start the task, is built and
   * written by such continuations of the same commit, so it goes out first and the submit's answer
   * right after it, in the same turn of the event loop. Both go out only after the one commit; only
   * the order of the two writes changes. Answered first, the submit (its view built, serialised
   * and written) would hold the claim's answer back, and the submitter's process would wake beside
   * the worker's, competing for the same few cores.
   */
  answerAfter<T extends { id: string }>(row: T): T | Promise<T> {
    if (!this.answerFirst.delete(row.id)) return row;
    return new Promise((resolve) => process.nextTick(resolve, row));
  }

  /** The safety re-check: one waiting claimer of each agent that has one looks again. */
  pollOnce(): void {
    for (const agent of this.waiters.agents()) this.waiters.wake(agent, false, 'poll');
  }

  close(): void {
    this.closed = true;
    for (const c of this.activeClaims) c.abort();
    this.stopTimers();
  }

  /**
   * Run `admitOnce` until it returns rows or `waitMs` has passed (then []). `admitOnce` may say,
   * through its `hint`, when a closed throttle reopens (a claimer of the agent looks then, not
   * later) and which pools the agent draws from (a seat freed in one of them wakes this claim too).
   */
  async wait(
    agent: string,
    waitMs: number,
    given: AbortSignal | undefined,
    admitOnce: (hint: ClaimHint) => Promise<ExecutionRow[]>,
    handoff?: Handoff,
  ): Promise<ExecutionRow[]> {
    const deadline = performance.now() + waitMs;
    const { signal, leave } = this.track(given);
    try {
      return await this.claimLoop(agent, admitOnce, deadline, signal, handoff);
    } finally {
      leave();
    }
  }

  /**
   * A claim starts waiting: its signal aborts when `given` does or close() ends every claim, and
   * the poll runs while any claim waits. Call `leave` once it stops.
   */
  track(given: AbortSignal | undefined): { signal: AbortSignal; leave(): void } {
    const local = new AbortController();
    const onAbort = () => local.abort();
    if (given?.aborted || this.closed) local.abort();
    given?.addEventListener('abort', onAbort, { once: true });
    this.activeClaims.add(local);
    if (!this.ticker && !this.closed) this.ticker = setInterval(() => this.pollOnce(), this.pollMs);
    const leave = () => {
      this.activeClaims.delete(local);
      given?.removeEventListener('abort', onAbort);
      if (this.activeClaims.size === 0) this.stopTimers();
    };
    return { signal: local.signal, leave };
  }

  private stopTimers(): void {
    clearInterval(this.ticker);
    this.ticker = undefined;
    for (const r of this.reopens.values()) clearTimeout(r.timer);
    this.reopens.clear();
  }

  /** A closed throttle of `agent` reopens in `ms`: one claimer of it looks then (passing the look on if it gets rows). */
  reopenIn(agent: string, ms: number): void {
    const at = performance.now() + Math.max(0, ms);
    const known = this.reopens.get(agent);
    if (known && known.at <= at) return;
    if (known) clearTimeout(known.timer);
    const timer = setTimeout(() => {
      this.reopens.delete(agent);
      this.waiters.wake(agent, false, 'poll');
    }, at - performance.now());
    this.reopens.set(agent, { at, timer });
  }

  /** The pools an agent draws from, as its last admission in this process said (for seatFreed). */
  private readonly poolsOf = new Map<string, string[]>();
  /** Per pool, the agents known here to draw from it. */
  private readonly membersOf = new Map<string, Set<string>>();

  /**
   * Work was queued for `agent` (`queued`) or one of its seats freed: wake one of its claimers,
   * and one claimer of every other agent known here to draw from a pool it draws from (a seat of
   * the pool freed with it; each such agent's claimer looks, and admission gives the seat to
   * whichever takes the pool's lock first). For a freed seat, claimers whose look found their
   * agent's queue empty are passed over (Waiters.wakeForSeat).
   */
  seatFreed(agent: string, ids: readonly string[] = [], queued = true, local = true): void {
    if (queued) this.idle.changed(agent);
    const wake = (a: string) => (queued ? this.waiters.wake(a, false, 'signal', a === agent ? ids : []) : this.waiters.wakeForSeat(a));
    if (!(local && ids.length === 1 && this.wokenEarly.delete(ids[0]!))) wake(agent);
    for (const p of this.poolsOf.get(agent) ?? []) {
      for (const m of this.membersOf.get(p) ?? []) if (m !== agent) wake(m);
    }
  }

  /** Remember which pools `agent` draws from, as an admission reported it. */
  notePools(agent: string, pools: string[]): void {
    for (const p of this.poolsOf.get(agent) ?? []) this.membersOf.get(p)?.delete(agent);
    if (pools.length === 0) {
      this.poolsOf.delete(agent);
      return;
    }
    this.poolsOf.set(agent, pools);
    for (const p of pools) {
      let members = this.membersOf.get(p);
      if (!members) this.membersOf.set(p, (members = new Set()));
      members.add(agent);
    }
  }

  private async claimLoop(
    agent: string,
    admitOnce: (hint: ClaimHint) => Promise<ExecutionRow[]>,
    deadline: number,
    signal: AbortSignal,
    handoff: Handoff | undefined,
  ): Promise<ExecutionRow[]> {
    let woken: Wake | undefined;
    // Executions just queued that a wake-up of this claim was for, and its next look must take or pass on.
    let owed: readonly string[] = [];
    // The wait ran out: the look after it is the last, even when the timer fired a little before
    // `deadline` (Node counts a timer from the event loop's clock as of the turn's start, which a busy
    // turn, a synchronous SQLite look included, leaves behind): no third look for a sliver of time.
    let ranOut = false;
    for (;;) {
      // Armed before the look: a wake meanwhile is not missed.
      const armed = this.waiters.arm(agent, signal);
      try {
        const hint: ClaimHint = {};
        const rows = await admitOnce(hint);
        if (hint.pools !== undefined) this.notePools(agent, hint.pools);
        if (rows.length > 0) {
          armed.disarm();
          this.passOn(agent, woken, [...owed, ...armed.work()], rows);
          return rows;
        }
        const remaining = deadline - performance.now();
        if (remaining <= 0 || ranOut || signal.aborted) return [];
        if (hint.nothingQueued) armed.nothingQueued();
        // A closed throttle reopens at a known time: a claimer of the agent looks again then (a timer,
        // not a faster poll), counted from now on the engine's clock, not from when admission said it
        // (its commit may have taken a while). A look that finds it still closed (the timer fired a
        // little early) says the reopening again, so the timer is set again rather than the poll awaited.
        if (hint.reopensAt !== undefined) this.reopenIn(agent, hint.reopensAt - this.now());
        // Parked: a submit of the agent may take this claim into its own call (takeParked).
        let answer: Promise<ExecutionRow[] | undefined> | undefined;
        if (handoff) answer = new Promise((settle) => armed.offer({ request: handoff.request, settle }));
        woken = await armed.wait(remaining);
        ranOut = woken === undefined;
        owed = armed.work();
        if (woken === 'taken') {
          const rows = await answer!;
          if (rows && rows.length > 0) return await this.handedOver(rows, signal, handoff!);
          // Nothing taken for it (not decided there, or the call failed): it looks itself, as woken.
        }
        // Aborted while waiting (the client left, the key was revoked, shutdown): admit nothing more.
        if (signal.aborted) return [];
      } finally {
        armed.disarm();
      }
    }
  }

  /**
   * A claim woken for work just queued (`work`) took `rows` without it: its look began before that
   * work was committed, or admission gave its seat to other work first (the key's or the agent's
   * turn, a task come due). The work is still queued and its announcement was spent on this claim,
   * so the next claimer of the agent is woken for it; one that finds nothing admissible parks, so
   * the wake-up goes no further than the work it announces can.
   */
  passOn(agent: string, woken: Wake | undefined, work: readonly string[], rows: readonly ExecutionRow[]): void {
    const taken = new Set(rows.map((r) => r.id));
    const left = work.filter((id) => !taken.has(id));
    // Found by a look nobody signalled (the poll, a reopening): more may be there unannounced, so the next claimer looks too.
    if (woken === 'poll') this.waiters.wake(agent, false, 'poll', left);
    else if (left.length > 0) this.waiters.wake(agent, false, 'signal', left);
  }

  /**
   * Rows a submit's call took for this claim, committed with it. Its caller may have left while
   * the call was out (the claim cannot withdraw from a call already sent, as an admission already
   * begun cannot): the rows then go back to the queue at once (their delivery not charged), and
   * their announcement wakes the next claimer, rather than waiting leased to nobody for the lease
   * to lapse. At shutdown they are answered: the server still answers the requests it holds.
   */
  private async handedOver(rows: ExecutionRow[], signal: AbortSignal, handoff: Handoff): Promise<ExecutionRow[]> {
    handoff.admitted(rows);
    if (!signal.aborted || this.closed) return rows;
    await handoff.giveBack(rows);
    return [];
  }
}

/** What one admission tells a waiting claim beyond its rows (src/engine/pools.ts reports it). */
export interface ClaimHint {
  /** When the closed throttles that stopped it have all reopened (ms, on the engine's clock). */
  reopensAt?: number;
  /** The pools the agent draws from. */
  pools?: string[];
  /** The agent had no queued row (admit.ts, onNothingQueued): a freed seat gives this claim nothing. */
  nothingQueued?: boolean;
}
