/**
 * Every grace the canary allows, derived from the constants of the component it watches, so
 * changing one cannot silently break the other (test/canary.graces.test.ts pins the relations).
 * A grace is how late a component may be before its lateness is a fault rather than jitter.
 */
import { DEFAULTS } from '../config.ts';

export interface CanaryTiming {
  /** The reaper's interval (±20 % jitter). */
  reaperIntervalMs: number;
  /** Queued longer than this is failed by the reaper as backlog_expired. */
  backlogExpiryMs: number;
  /** The push dispatcher re-checks push agents' queues at least this often (even without a wake-up). */
  dispatchPollMs: number;
  /** How often the scheduler looks for due schedules. */
  schedulerIntervalMs: number;
}

/**
 * The scheduler's tick when src/config.ts does not name one: it runs on the same cadence as the
 * reaper. If DEFAULTS gains `schedulerIntervalMs`, that value is used instead.
 */
const schedulerIntervalMs = (DEFAULTS as { schedulerIntervalMs?: number }).schedulerIntervalMs ?? DEFAULTS.reaperIntervalMs;

export const DEFAULT_TIMING: CanaryTiming = Object.freeze({
  reaperIntervalMs: DEFAULTS.reaperIntervalMs,
  backlogExpiryMs: DEFAULTS.backlogExpiryMs,
  // `baton up` passes the dispatcher's and scheduler's own constants (DISPATCH_POLL_MS,
  // SCHEDULER_INTERVAL_MS); these defaults are for a canary run outside a node.
  dispatchPollMs: DEFAULTS.claimPollMs,
  schedulerIntervalMs,
});

/**
 * Servers stamp rows with their own clocks; the canary may run on another machine. Ordering
 * checks (G-03) allow this much disagreement between clocks. It is an allowance for NTP-synced
 * hosts, not a timing grace: a larger skew is itself worth a warning.
 */
export const CLOCK_SKEW_ALLOWANCE_MS = 1_000;

export const graces = {
  /** E-01: a lapsed lease is picked up within one reaper interval; two intervals is a dead reaper. */
  leaseLapse: (t: CanaryTiming) => 2 * t.reaperIntervalMs,
  /** E-01: the timeout sweep runs in the same reaper pass, so the same grace. */
  timeout: (t: CanaryTiming) => 2 * t.reaperIntervalMs,
  /** S-03: a lease may not reach further ahead than its TTL, plus the lease-lapse grace for skew. */
  leaseHorizon: (t: CanaryTiming) => 2 * t.reaperIntervalMs,
  /** B-05: the backlog-expiry sweep is also a reaper pass. */
  backlogExpiry: (t: CanaryTiming) => t.backlogExpiryMs + 2 * t.reaperIntervalMs,
  /**
   * B-02: the dispatcher re-checks the queue every poll even when a wake-up is lost; ten
   * missed polls with seats free is a stuck dispatcher, not scheduling jitter.
   */
  dispatchSla: (t: CanaryTiming) => 10 * t.dispatchPollMs,
  /** E-06: a due schedule is fired on the next scheduler tick; two ticks past its misfire grace is a stuck scheduler. */
  schedulerLag: (t: CanaryTiming) => 2 * t.schedulerIntervalMs,
  /** G-03 */
  clockSkew: (_t: CanaryTiming) => CLOCK_SKEW_ALLOWANCE_MS,
};
