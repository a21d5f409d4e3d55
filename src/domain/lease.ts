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
 */
export class LeaseKeeper {
  private readonly ctrl = new AbortController();
  private readonly renewTimer: ReturnType<typeof setInterval>;
  private readonly deadlineTimer: ReturnType<typeof setTimeout>;
  private lapseTimer: ReturnType<typeof setTimeout> | undefined;
  private readonly mono: () => number;
  /** Monotonic ms at which the lease was last granted (see the class comment). */
  private grantedAt: number;
  private stopped = false;
  private renewing = false;
  /** The lease expired without a successful renewal (it is also `lost`). */
  lapsed = false;
  /** A renewal (or another request on the lease, see markLost) answered that the lease is gone. */
  lost = false;

  constructor(private readonly opts: LeaseKeeperOptions) {
    const ttlMs = opts.leaseTtlSeconds * 1000;
    this.mono = opts.monotonic ?? (() => performance.now());
    this.grantedAt = this.mono();
    this.armLapse(ttlMs);
    this.renewTimer = setInterval(() => void this.renewOnce(ttlMs), Math.max(MIN_RENEW_MS, ttlMs / 3));
    const untilDeadline = (opts.deadlineAt ?? Infinity) - (opts.now ?? Date.now)();
    this.deadlineTimer = setTimeout(() => this.abort('deadline'), Math.min(MAX_TIMER_MS, Math.max(0, untilDeadline)));
  }

  /** Aborted with a TaskAborted once the work should stop. */
  get signal(): AbortSignal {
    return this.ctrl.signal;
  }

  /** Why the work was told to stop, if it was. */
  get reason(): AbortReason | undefined {
    return this.ctrl.signal.aborted ? (this.ctrl.signal.reason as TaskAborted).reason : undefined;
  }

  abort(reason: AbortReason): void {
    if (!this.ctrl.signal.aborted) this.ctrl.abort(new TaskAborted(reason));
  }

  /** The lease is gone: stop renewing and abort the work. */
  markLost(): void {
    this.lost = true;
    this.abort('lease_lost');
  }

  /** The work is over: no more renewals, no deadline. */
  stop(): void {
    this.stopped = true;
    clearInterval(this.renewTimer);
    clearTimeout(this.deadlineTimer);
    clearTimeout(this.lapseTimer);
  }

  /** Checks the lease's expiry when it falls due, and again after each later grant. */
  private armLapse(ttlMs: number): void {
    clearTimeout(this.lapseTimer);
    if (this.stopped || this.lost) return;
    const left = this.grantedAt + ttlMs - this.mono();
    if (left > 0) {
      this.lapseTimer = setTimeout(() => this.armLapse(ttlMs), Math.min(MAX_TIMER_MS, Math.ceil(left)));
      return;
    }
    this.lapsed = true;
    this.markLost();
    this.opts.onLapse?.();
  }

  /** Catches every failure itself, so the timer can drop its promise. */
  private async renewOnce(ttlMs: number): Promise<void> {
    if (this.renewing || this.lost) return;
    this.renewing = true;
    const sent = this.mono();
    try {
      const r = await this.opts.renew();
      // An answer that arrives after the lease was given up changes nothing: the work is aborted.
      if (this.lost) return;
      this.grantedAt = Math.max(this.grantedAt, sent);
      this.armLapse(ttlMs);
      if (r.cancel_requested) this.abort('cancelled');
    } catch (err) {
      if (this.opts.isLeaseLost(err)) this.markLost();
      else this.opts.onRenewError?.(err, ttlMs / 3);
    } finally {
      this.renewing = false;
    }
  }
}
