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
}

/**
 * Renews a lease every third of its TTL, so two renewals can fail in a row before it lapses; one
 * renewal at a time, none once the lease is lost. Aborts `signal` (with a TaskAborted) on a
 * requested cancellation, at the deadline, on a lost lease, or when told to (shutdown). The first
 * reason wins; a lost lease is remembered even when another reason came first.
 */
export class LeaseKeeper {
  private readonly ctrl = new AbortController();
  private readonly renewTimer: ReturnType<typeof setInterval>;
  private readonly deadlineTimer: ReturnType<typeof setTimeout>;
  private renewing = false;
  /** A renewal (or another request on the lease, see markLost) answered that the lease is gone. */
  lost = false;

  constructor(private readonly opts: LeaseKeeperOptions) {
    const ttlMs = opts.leaseTtlSeconds * 1000;
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
    clearInterval(this.renewTimer);
    clearTimeout(this.deadlineTimer);
  }

  /** Catches every failure itself, so the timer can drop its promise. */
  private async renewOnce(ttlMs: number): Promise<void> {
    if (this.renewing || this.lost) return;
    this.renewing = true;
    try {
      const r = await this.opts.renew();
      if (r.cancel_requested) this.abort('cancelled');
    } catch (err) {
      if (this.opts.isLeaseLost(err)) this.markLost();
      else this.opts.onRenewError?.(err, ttlMs / 3);
    } finally {
      this.renewing = false;
    }
  }
}
