import type { ExecutionRow } from '../store/schema.ts';

/**
 * Long-poll wake-ups. A claimer arms a waiter *before* it looks at the queue, so a signal that
 * lands between "nothing admissible" and "start waiting" is not lost.
 */
export class Waiters {
  private readonly byAgent = new Map<string, Set<() => void>>();

  /**
   * Wake one waiter of `agent` (one queued task or one freed seat is work for one claimer;
   * waking them all makes every loser queue on the agent lock), or all of them (`everyone`,
   * e.g. after the cap was raised).
   */
  wake(agent: string, everyone = false): void {
    const set = this.byAgent.get(agent);
    if (!set) return;
    for (const fire of set) {
      set.delete(fire);
      fire();
      if (!everyone) break;
    }
    if (set.size === 0) this.byAgent.delete(agent);
  }

  /** Returns `wait(ms)`, resolving early when `agent` is signalled after this call. */
  arm(agent: string, signal?: AbortSignal): { wait: (ms: number) => Promise<void>; disarm: () => void } {
    let fired = false;
    let resolve: (() => void) | undefined;
    const fire = () => {
      fired = true;
      resolve?.();
    };
    let set = this.byAgent.get(agent);
    if (!set) this.byAgent.set(agent, (set = new Set()));
    set.add(fire);
    const disarm = () => {
      const s = this.byAgent.get(agent);
      s?.delete(fire);
      if (s && s.size === 0) this.byAgent.delete(agent);
    };
    const wait = (ms: number) =>
      new Promise<void>((res) => {
        if (fired || signal?.aborted) return res();
        const timer = setTimeout(done, ms);
        function done() {
          clearTimeout(timer);
          signal?.removeEventListener('abort', done);
          res();
        }
        resolve = done;
        signal?.addEventListener('abort', done, { once: true });
      });
    return { wait, disarm };
  }
}

/**
 * Claims that wait for work (long-poll): each looks again when its agent is signalled, or every
 * `pollMs`, until it gets rows, its wait is over, its signal aborts, or close() ends them all.
 */
export class ClaimWaits {
  private readonly waiters = new Waiters();
  /** Waiting long-poll claims; close() wakes them all so shutdown does not wait for them. */
  private readonly activeClaims = new Set<AbortController>();
  private closed = false;

  constructor(
    private readonly pollMs: number,
    /** The engine's clock, the one admission's reopening times are on. */
    private readonly now: () => number,
  ) {}

  /** See Waiters.wake. */
  wake(agent: string, everyone = false): void {
    this.waiters.wake(agent, everyone);
  }

  close(): void {
    this.closed = true;
    for (const c of this.activeClaims) c.abort();
  }

  /**
   * Run `admitOnce` until it returns rows or `waitMs` has passed (then []). `admitOnce` may say,
   * through its `hint`, when a closed throttle reopens (the wait ends then, not later) and which
   * pools the agent draws from (a seat freed in one of them wakes this claim too).
   */
  async wait(
    agent: string,
    waitMs: number,
    given: AbortSignal | undefined,
    admitOnce: (hint: ClaimHint) => Promise<ExecutionRow[]>,
  ): Promise<ExecutionRow[]> {
    const deadline = performance.now() + waitMs;
    const local = new AbortController();
    const signal = local.signal;
    const onAbort = () => local.abort();
    if (given?.aborted || this.closed) local.abort();
    given?.addEventListener('abort', onAbort, { once: true });
    this.activeClaims.add(local);
    try {
      return await this.claimLoop(agent, admitOnce, deadline, signal);
    } finally {
      this.activeClaims.delete(local);
      given?.removeEventListener('abort', onAbort);
    }
  }

  /** The pools an agent draws from, as its last admission in this process said (for seatFreed). */
  private readonly poolsOf = new Map<string, string[]>();
  /** Per pool, the agents known here to draw from it. */
  private readonly membersOf = new Map<string, Set<string>>();

  /**
   * Work was queued for `agent` or one of its seats freed: wake one of its claimers, and one
   * claimer of every other agent known here to draw from a pool it draws from (a seat of the pool
   * freed with it; each such agent's claimer looks, and admission gives the seat to whichever
   * takes the pool's lock first).
   */
  seatFreed(agent: string): void {
    this.waiters.wake(agent);
    for (const p of this.poolsOf.get(agent) ?? []) {
      for (const m of this.membersOf.get(p) ?? []) if (m !== agent) this.waiters.wake(m);
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
  ): Promise<ExecutionRow[]> {
    for (;;) {
      // Armed before the look: a wake meanwhile is not missed.
      const armed = this.waiters.arm(agent, signal);
      try {
        const hint: ClaimHint = {};
        const rows = await admitOnce(hint);
        if (hint.pools !== undefined) this.notePools(agent, hint.pools);
        if (rows.length > 0) return rows;
        const remaining = deadline - performance.now();
        if (remaining <= 0 || signal.aborted) return [];
        // A closed throttle reopens at a known time: look again then (a timer, not a faster poll).
        // Counted from now, not from when admission said it: its commit may have taken a while.
        // A look that finds it still closed (the timer fired a little early on this clock) says
        // the reopening again, so the claim re-arms for it rather than waiting for the poll.
        const ms = Math.min(remaining, this.pollMs, hint.reopensAt === undefined ? Infinity : hint.reopensAt - this.now());
        await armed.wait(Math.max(0, ms));
        // Aborted while waiting (the client left, the key was revoked, shutdown): admit nothing more.
        if (signal.aborted) return [];
      } finally {
        armed.disarm();
      }
    }
  }
}

/** What one admission tells a waiting claim beyond its rows (src/engine/pools.ts reports it). */
export interface ClaimHint {
  /** When the closed throttles that stopped it have all reopened (ms, on the engine's clock). */
  reopensAt?: number;
  /** The pools the agent draws from. */
  pools?: string[];
}
