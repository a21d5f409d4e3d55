import { Cron } from 'croner';
import { BatonError } from '../../domain/errors.ts';

/**
 * Cron expressions through croner: 5 fields (minute precision) or 6 (seconds first), evaluated
 * in an IANA time zone. Daylight-saving days: a local time skipped by spring-forward runs at the
 * first valid instant after it (croner). A local time repeated by fall-back runs once — the first
 * time — when the hour field names hours (`30 1 * * *`, `30 1,2 * * *`, `0 0-3 * * *`); croner
 * alone runs a list or range twice, so nextAfter skips the repeat. An hour field that is a
 * wildcard (`*`, or `*` with a step) is an interval, and keeps running through both passes of the hour, as
 * in Vixie cron.
 */
/**
 * Compiled expressions by time zone and text. A paused Cron is only asked for run times after a
 * given date, so one instance serves every schedule with the same expression; compiling (and
 * checking the zone) costs far more than the scheduler's other work per fire. Oldest out first.
 */
const compiled = new Map<string, Cron>();
const COMPILED_MAX = 2_000;
/** Zone names the runtime accepted (a bounded set: the runtime knows a few hundred). */
const zones = new Set<string>();

export function compileCron(expr: string, timezone: string, field = 'cron'): Cron {
  const key = `${timezone}\n${expr}`;
  const cached = compiled.get(key);
  if (cached) return cached;
  const parts = expr.trim().split(/\s+/);
  if (parts.length !== 5 && parts.length !== 6) {
    throw new BatonError(
      'validation_error',
      `body.${field}: '${expr}' has ${parts.length} fields; give 5 (minute hour day month weekday) or 6 (second first)`,
    );
  }
  checkTimezone(timezone);
  try {
    const c = new Cron(expr, { timezone, paused: true, mode: '5-or-6-parts' });
    // croner reports some errors only on first use; an expression with no next run never fires
    // (`0 0 30 2 *`: February has no 30th) and is refused rather than stored enabled with no next run.
    if (c.nextRun() === null) throw new NeverFires();
    const hour = parts[parts.length === 6 ? 2 : 1]!;
    meta.set(c, { timezone, skipRepeats: !hour.startsWith('*') });
    if (compiled.size >= COMPILED_MAX) compiled.delete(compiled.keys().next().value!);
    compiled.set(key, c);
    return c;
  } catch (err) {
    if (err instanceof NeverFires) throw new BatonError('validation_error', `body.${field}: '${expr}' never fires (no date matches it)`);
    throw new BatonError('validation_error', `body.${field}: '${expr}' is not a valid cron expression: ${(err as Error).message}`);
  }
}

class NeverFires extends Error {}

/** Per compiled expression: its zone, and whether a fall-back repeat of a local time is skipped. */
const meta = new WeakMap<Cron, { timezone: string; skipRepeats: boolean }>();

/** Local wall-clock time of `ms` in `timezone`, to the second. */
const formatters = new Map<string, Intl.DateTimeFormat>();
function wallClock(ms: number, timezone: string): string {
  let f = formatters.get(timezone);
  if (!f) {
    f = new Intl.DateTimeFormat('en-US', {
      timeZone: timezone,
      hourCycle: 'h23',
      year: 'numeric',
      month: '2-digit',
      day: '2-digit',
      hour: '2-digit',
      minute: '2-digit',
      second: '2-digit',
    });
    formatters.set(timezone, f);
  }
  return f.format(ms);
}

/**
 * Fall-back shifts in use: one hour almost everywhere, 30 minutes on Lord Howe Island. An instant
 * whose wall-clock time already occurred this long before is the second pass of a repeated time.
 */
const FALL_BACK_SHIFTS_MS = [60 * 60_000, 30 * 60_000];
function isRepeat(ms: number, timezone: string): boolean {
  const wall = wallClock(ms, timezone);
  return FALL_BACK_SHIFTS_MS.some((shift) => wallClock(ms - shift, timezone) === wall);
}

export function checkTimezone(timezone: string, field = 'timezone'): void {
  if (zones.has(timezone)) return;
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: timezone });
    zones.add(timezone);
  } catch {
    throw new BatonError(
      'validation_error',
      `body.${field}: '${timezone}' is not an IANA time zone (e.g. UTC, Europe/Berlin, America/New_York)`,
    );
  }
}

/** The first due time strictly after `after` (epoch ms), or null when the expression has no more. */
export function nextAfter(c: Cron, after: number): number | null {
  let memo = nextMemo.get(c);
  if (!memo) nextMemo.set(c, (memo = new Map()));
  const hit = memo.get(after);
  if (hit !== undefined) return hit;
  const m = meta.get(c);
  let next = c.nextRun(new Date(after))?.getTime() ?? null;
  // At most a few repeats in a row (one per listed hour in the repeated span).
  for (let i = 0; i < 64 && next !== null && m?.skipRepeats && isRepeat(next, m.timezone); i++)
    next = c.nextRun(new Date(next))?.getTime() ?? null;
  if (memo.size >= NEXT_MEMO_MAX) memo.clear();
  memo.set(after, next);
  return next;
}
/**
 * Recent answers per compiled expression: schedules sharing an expression and a due time (a
 * common case: many jobs at 09:00) share the walk to their next due time, which is the
 * scheduler's costliest step per fire after compiling.
 */
const nextMemo = new WeakMap<Cron, Map<number, number | null>>();
const NEXT_MEMO_MAX = 256;

export function nextRuns(c: Cron, after: number, n: number): number[] {
  const out: number[] = [];
  for (let t: number | null = after; out.length < n && (t = nextAfter(c, t)) !== null;) out.push(t);
  return out;
}
