import { Cron } from 'croner';
import { BatonError } from '../../domain/errors.ts';

/**
 * Cron expressions through croner: 5 fields (minute precision) or 6 (seconds first), evaluated
 * in an IANA time zone. Daylight-saving days follow croner: a local time skipped by spring-forward
 * runs at the first valid instant after it; a local time repeated by fall-back runs once.
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
    throw new BatonError('validation_error', `body.${field}: '${expr}' has ${parts.length} fields; give 5 (minute hour day month weekday) or 6 (second first)`);
  }
  checkTimezone(timezone);
  try {
    const c = new Cron(expr, { timezone, paused: true, mode: '5-or-6-parts' });
    c.nextRun(); // croner reports some errors only on first use
    if (compiled.size >= COMPILED_MAX) compiled.delete(compiled.keys().next().value!);
    compiled.set(key, c);
    return c;
  } catch (err) {
    throw new BatonError('validation_error', `body.${field}: '${expr}' is not a valid cron expression: ${(err as Error).message}`);
  }
}

export function checkTimezone(timezone: string, field = 'timezone'): void {
  if (zones.has(timezone)) return;
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: timezone });
    zones.add(timezone);
  } catch {
    throw new BatonError('validation_error', `body.${field}: '${timezone}' is not an IANA time zone (e.g. UTC, Europe/Berlin, America/New_York)`);
  }
}

/** The first due time strictly after `after` (epoch ms), or null when the expression has no more. */
export function nextAfter(c: Cron, after: number): number | null {
  let memo = nextMemo.get(c);
  if (!memo) nextMemo.set(c, (memo = new Map()));
  const hit = memo.get(after);
  if (hit !== undefined) return hit;
  const d = c.nextRun(new Date(after));
  if (memo.size >= NEXT_MEMO_MAX) memo.clear();
  memo.set(after, d ? d.getTime() : null);
  return d ? d.getTime() : null;
}
/**
 * Recent answers per compiled expression: schedules sharing an expression and a due time (a
 * common case: many jobs at 09:00) share the walk to their next due time, which is the
 * scheduler's costliest step per fire after compiling.
 */
const nextMemo = new WeakMap<Cron, Map<number, number | null>>();
const NEXT_MEMO_MAX = 256;

export function nextRuns(c: Cron, after: number, n: number): number[] {
  return c.nextRuns(n, new Date(after)).map((d) => d.getTime());
}
