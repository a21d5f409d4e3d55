import { Cron } from 'croner';
import { BatonError } from '../../domain/errors.ts';

/**
 * Cron expressions through croner: 5 fields (minute precision) or 6 (seconds first), evaluated
 * in an IANA time zone. Daylight-saving days follow croner: a local time skipped by spring-forward
 * runs at the first valid instant after it; a local time repeated by fall-back runs once.
 */
export function compileCron(expr: string, timezone: string, field = 'cron'): Cron {
  const parts = expr.trim().split(/\s+/);
  if (parts.length !== 5 && parts.length !== 6) {
    throw new BatonError('validation_error', `body.${field}: '${expr}' has ${parts.length} fields; give 5 (minute hour day month weekday) or 6 (second first)`);
  }
  checkTimezone(timezone);
  try {
    const c = new Cron(expr, { timezone, paused: true, mode: '5-or-6-parts' });
    c.nextRun(); // croner reports some errors only on first use
    return c;
  } catch (err) {
    throw new BatonError('validation_error', `body.${field}: '${expr}' is not a valid cron expression: ${(err as Error).message}`);
  }
}

export function checkTimezone(timezone: string, field = 'timezone'): void {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: timezone });
  } catch {
    throw new BatonError('validation_error', `body.${field}: '${timezone}' is not an IANA time zone (e.g. UTC, Europe/Berlin, America/New_York)`);
  }
}

/** The first due time strictly after `after` (epoch ms), or null when the expression has no more. */
export function nextAfter(c: Cron, after: number): number | null {
  const d = c.nextRun(new Date(after));
  return d ? d.getTime() : null;
}

export function nextRuns(c: Cron, after: number, n: number): number[] {
  return c.nextRuns(n, new Date(after)).map((d) => d.getTime());
}
