/**
 * Throttles: at most `limit` starts per `period_seconds`, plus `burst` more at once after a quiet
 * spell, on an agent, on each of an agent's keys, or on a pool. Plain data and pure helpers; the
 * state is one number per throttled thing (its theoretical arrival time, `tat`, in ms), kept on
 * its row and changed by admission under that row's lock.
 *
 * The algorithm is the generic cell rate algorithm (GCRA): each start moves `tat` one emission
 * interval (period / limit) later; a start is allowed while `tat` is at most `burst` intervals
 * ahead of now. Starts in any half-open window of one period are therefore at most
 * `limit + burst`, which is what the canary checks. Nothing is dropped: a throttled task stays
 * queued, and the waiting answer says when the throttle next admits.
 */

export const THROTTLE_MAX_LIMIT = 1_000_000;
export const THROTTLE_MAX_PERIOD_SECONDS = 86_400;
export const THROTTLE_MAX_BURST = 100_000;

export interface Throttle {
  /** Starts allowed per period (at least 1). */
  limit: number;
  /** The period, in seconds (1 to a day). */
  period_seconds: number;
  /** Extra starts allowed at once after a quiet spell (0: starts are spaced evenly). */
  burst: number;
}

/** The spacing between starts the throttle allows, in ms (rounded up: never faster than asked). */
export function emissionMs(t: Throttle): number {
  return Math.ceil((t.period_seconds * 1000) / t.limit);
}

/** May a task start at `now` under throttle `t` whose state is `tat` (null: never started)? */
export function throttleAdmits(t: Throttle, tat: number | null, now: number): boolean {
  return tat === null || tat - t.burst * emissionMs(t) <= now;
}

/** The state after one start at `now` (call only where throttleAdmits said yes). */
export function afterStart(t: Throttle, tat: number | null, now: number): number {
  return Math.max(tat ?? now, now) + emissionMs(t);
}

/** When the throttle next admits a start (now or earlier: it admits now). */
export function nextStartAt(t: Throttle, tat: number | null, now: number): number {
  return tat === null ? now : Math.max(now, tat - t.burst * emissionMs(t));
}

/** A throttle from its stored JSON (null: none). */
export function parseThrottle(json: string | null | undefined): Throttle | null {
  if (json === null || json === undefined || json === '') return null;
  const t = JSON.parse(json) as Partial<Throttle>;
  return { limit: Number(t.limit), period_seconds: Number(t.period_seconds), burst: Number(t.burst ?? 0) };
}

/** What is wrong with a throttle, naming the field (null: nothing). The API's zod schema says the same. */
export function throttleProblem(t: Throttle): string | null {
  if (!Number.isInteger(t.limit) || t.limit < 1 || t.limit > THROTTLE_MAX_LIMIT)
    return `limit must be an integer from 1 to ${THROTTLE_MAX_LIMIT}`;
  if (!Number.isInteger(t.period_seconds) || t.period_seconds < 1 || t.period_seconds > THROTTLE_MAX_PERIOD_SECONDS)
    return `period_seconds must be an integer from 1 to ${THROTTLE_MAX_PERIOD_SECONDS}`;
  if (!Number.isInteger(t.burst) || t.burst < 0 || t.burst > THROTTLE_MAX_BURST)
    return `burst must be an integer from 0 to ${THROTTLE_MAX_BURST}`;
  return null;
}

/** One sentence for a throttle, e.g. "10 starts per 60 s (burst 2)". */
export function describeThrottle(t: Throttle): string {
  return `${t.limit} start${t.limit === 1 ? '' : 's'} per ${t.period_seconds} s${t.burst > 0 ? ` (burst ${t.burst})` : ''}`;
}
