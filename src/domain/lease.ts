/**
 * Keeping a claimed task's lease while its work runs, for whoever does the work: the worker SDK
 * (src/worker/sdk.ts, over HTTP) and the push dispatcher (src/delivery/dispatcher.ts, in the
 * server). Both renew on the same interval, abort at the same deadline and tell a lost lease
 * from a cancellation the same way; only the renewal request differs, so it is handed in and
 * this module does no I/O of its own (docs/concepts.md, "Leases and fencing").
 */

/** Why a task's work was told to stop. */
export type AbortReason = 'cancelled' | 'deadline' | 'lease_lost' | 'shutdown';

const ABORT_MESSAGES: Record<AbortReason, string> = {
  cancelled: 'cancellation was requested',
  deadline: 'the task deadline passed',
  lease_lost: 'the lease was lost (another worker may own the task now)',
  shutdown: 'the worker is shutting down',
};

/** `signal.reason` of a task's aborted signal: says why. */
export class TaskAborted extends Error {
  constructor(readonly reason: AbortReason) {
    super(ABORT_MESSAGES[reason]);
    this.name = 'TaskAborted';
  }
}

/** Longest delay a Node timer takes; a later deadline waits this long (about 24.8 days). */
const MAX_TIMER_MS = 2 ** 31 - 1;
/** Shortest renewal interval, whatever the lease TTL: a tiny TTL must not turn into a busy loop. */
const MIN_RENEW_MS = 200;

export interface LeaseKeeperOptions {
  leaseTtlSeconds: number;
  /** The task's hard deadline in ms since the epoch; null: none. */
  deadlineAt: number | null;
  /** The clock the deadline is on (default Date.now). */
  now?: () => number;
  /** Renew the lease once; its answer also carries a requested cancellation. */
  renew(): Promise<{ cancel_requested: boolean }>;
  /** Whether a failed renewal means the lease is gone (another owner may hold the task now). */
  isLeaseLost(err: unknown): boolean;
  /** Any other failed renewal: the next one, a third of a lease later, tries again. */
  onRenewError?(err: unknown, retryInMs: number): void;
  /** The lease expired (as last granted) without a successful renewal; the work is aborted as lost. */
  onLapse?(): void;
  /**
   * A monotonic clock in ms (default performance.now) for the lease's own expiry: a wall-clock
   * step must neither end a live lease early nor keep a lapsed one going.
   */
  monotonic?: () => number;
}

/**
 * Renews a lease every third of its TTL, so two renewals can fail in a row before it lapses; one
 * renewal at a time, none once the lease is lost. Aborts `signal` (with a TaskAborted) on a
 * requested cancellation, at the deadline, on a lost lease, or when told to (shutdown). The first
 * reason wins; a lost lease is remembered even when another reason came first.
 *
 * A lease that could not be renewed is lost once it expires, even though no server said so (the
 * network is cut, the server or its database is down): the reaper may hand the task to another
 * worker from then on, so the work is aborted and its outcome never reported. The expiry is kept
 * on the worker's own monotonic clock, from when the lease was last granted: the claim's answer,
 * then the moment each successful renewal was sent (the server granted a full TTL no earlier).
 * Two runs of one task therefore overlap for at most about one TTL plus one renewal interval.
 *
 * One timer per lease while all is well: the renewal interval, whose tick also looks ahead. The
 * expiry and the deadline get a timer of their own only once they are less than an interval
 * away (a renewal failed, or the deadline is near), so a worker running thousands of short tasks
 * creates one timer per task, not three. The abort signal is made when first read: work that
 * never looks at it costs no AbortController.
 *
 * Once the work has returned, its outcome still has to reach the server (the worker SDK's
 * completion can wait behind a batch of others, src/worker/completions.ts): `workDone()` keeps
 * the renewals going until `stop()`, so the reaper does not re-queue a task whose result is on
 * its way. From then on nothing aborts the work or lapses it (it has nothing left to stop, and a
 * completion with the latest token lands even after a lapse); a renewal answered that the lease
 * is gone only sets `lost` and ends the renewals.
 */
export class LeaseKeeper {
  private ctrl: AbortController | undefined;
  private aborted: AbortReason | undefined;
  private readonly abortCallbacks: Array<() => void> = [];
  private readonly renewTimer: ReturnType<typeof setInterval>;
  private deadlineTimer: ReturnType<typeof setTimeout> | undefined;
  private lapseTimer: ReturnType<typeof setTimeout> | undefined;
  private readonly mono: () => number;
  private readonly ttlMs: number;
  private readonly intervalMs: number;
  /** performance.now() at which the deadline falls. */
  private readonly deadlineDue: number;
  /** Monotonic ms at which the lease was last granted (see the class comment). */
  private grantedAt: number;
  private stopped = false;
  /** The work returned (workDone): renew until stop(), but abort and lapse nothing. */
  private done = false;
  private renewing = false;
  /** The lease expired without a successful renewal (it is also `lost`). */
  lapsed = false;
  /** A renewal (or another request on the lease, see markLost) answered that the lease is gone. */
  lost = false;

  constructor(private readonly opts: LeaseKeeperOptions) {
    this.ttlMs = opts.leaseTtlSeconds * 1000;
    this.intervalMs = Math.max(MIN_RENEW_MS, this.ttlMs / 3);
    this.mono = opts.monotonic ?? (() => performance.now());
    this.grantedAt = this.mono();
    this.deadlineDue = performance.now() + ((opts.deadlineAt ?? Infinity) - (opts.now ?? Date.now)());
    this.renewTimer = setInterval(() => this.tick(), this.intervalMs);
    this.lookAhead();
  }

  /** Aborted with a TaskAborted once the work should stop. */
  get signal(): AbortSignal {
    if (!this.ctrl) {
      this.ctrl = new AbortController();
      if (this.aborted) this.ctrl.abort(new TaskAborted(this.aborted));
    }
    return this.ctrl.signal;
  }

  /** Why the work was told to stop, if it was. */
  get reason(): AbortReason | undefined {
    return this.aborted;
  }

  /** Calls `fn` once the work is told to stop (at once if it was): a listener without an EventTarget. */
  onAbort(fn: () => void): void {
    if (this.aborted) fn();
    else this.abortCallbacks.push(fn);
  }

  abort(reason: AbortReason): void {
    if (this.aborted || this.done) return;
    this.aborted = reason;
    this.ctrl?.abort(new TaskAborted(reason));
    for (const fn of this.abortCallbacks.splice(0)) fn();
  }

  /** The lease is gone: stop renewing and abort the work (if it is still running). */
  markLost(): void {
    this.lost = true;
    if (this.done) clearInterval(this.renewTimer);
    this.abort('lease_lost');
  }

  /**
   * The work returned and its outcome is being reported: keep renewing until stop(), but the
   * deadline, a requested cancellation, a lapse or another abort no longer change anything.
   */
  workDone(): void {
    this.done = true;
    clearTimeout(this.deadlineTimer);
    clearTimeout(this.lapseTimer);
  }

  /** The work is over: no more renewals, no deadline. */
  stop(): void {
    this.stopped = true;
    clearInterval(this.renewTimer);
    clearTimeout(this.deadlineTimer);
    clearTimeout(this.lapseTimer);
  }

  private tick(): void {
    this.lookAhead();
    void this.renewOnce();
  }

  /** Arms the expiry's and the deadline's own timers once either is less than an interval away. */
  private lookAhead(): void {
    if (this.stopped || this.done) return;
    if (this.deadlineTimer === undefined && this.deadlineDue - performance.now() <= this.intervalMs) {
      const left = Math.max(0, this.deadlineDue - performance.now());
      this.deadlineTimer = setTimeout(() => this.abort('deadline'), Math.min(MAX_TIMER_MS, left));
    }
    if (this.lapseTimer === undefined && this.grantedAt + this.ttlMs - this.mono() <= this.intervalMs) this.checkLapse();
  }

  /** Checks the lease's expiry when it falls due, and again after each later grant. */
  private checkLapse(): void {
    clearTimeout(this.lapseTimer);
    this.lapseTimer = undefined;
    if (this.stopped || this.lost || this.done) return;
    const left = this.grantedAt + this.ttlMs - this.mono();
    // Renewed meanwhile: the interval's look-ahead arms this again when the expiry nears.
    if (left > this.intervalMs) return;
    if (left > 0) {
      this.lapseTimer = setTimeout(() => this.checkLapse(), Math.ceil(left));
      return;
    }
    this.lapsed = true;
    this.markLost();
    this.opts.onLapse?.();
  }

  /** Catches every failure itself, so the timer can drop its promise. */
  private async renewOnce(): Promise<void> {
    if (this.renewing || this.lost || this.stopped) return;
    this.renewing = true;
    const sent = this.mono();
    try {
      const r = await this.opts.renew();
      // An answer that arrives after the lease was given up changes nothing: the work is aborted.
      if (this.lost) return;
      this.grantedAt = Math.max(this.grantedAt, sent);
      if (r.cancel_requested) this.abort('cancelled');
    } catch (err) {
      if (this.opts.isLeaseLost(err)) this.markLost();
      else this.opts.onRenewError?.(err, this.ttlMs / 3);
    } finally {
      this.renewing = false;
    }
  }
}
