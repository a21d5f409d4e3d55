/**
 * Daylight-saving days. On fall-back a local time occurs twice; a schedule naming hours runs it
 * once (the first time), whether its hour field is one hour, a list or a range. An hour wildcard
 * is an interval and runs through both passes. Several zones, including one with a 30-minute shift.
 */
import { Cron } from 'croner';
import { describe, expect, it } from 'vitest';
import { compileCron, nextRuns } from '../../src/engine/triggers/cron.ts';

/** Fall-back days (UTC start of a window that covers the repeated local hour). */
const FALL_BACK = [
  { tz: 'America/New_York', from: '2026-11-01T03:00:00Z' }, // 02:00 EDT → 01:00 EST
  { tz: 'Europe/Berlin', from: '2026-10-24T21:00:00Z' }, // 03:00 CEST → 02:00 CET
  { tz: 'Australia/Sydney', from: '2026-04-04T12:00:00Z' }, // 03:00 AEDT → 02:00 AEST
  { tz: 'Australia/Lord_Howe', from: '2026-04-04T12:00:00Z' }, // 02:00 → 01:30 (30-minute shift)
];

const wall = (ms: number, tz: string) =>
  new Intl.DateTimeFormat('en-GB', { timeZone: tz, dateStyle: 'short', timeStyle: 'medium' }).format(ms);

function runsWithin(expr: string, tz: string, from: string, hours = 8): number[] {
  const start = Date.parse(from);
  return nextRuns(compileCron(expr, tz), start - 1, 200).filter((t) => t < start + hours * 3_600_000);
}

describe('fall-back: a repeated local time runs once', () => {
  for (const { tz, from } of FALL_BACK) {
    for (const expr of ['30 1 * * *', '30 1,2 * * *', '0 0-3 * * *', '0,30 0-4 * * *', '0 30 1,2 * * *']) {
      it(`${expr} in ${tz}`, () => {
        const runs = runsWithin(expr, tz, from);
        const walls = runs.map((t) => wall(t, tz));
        expect(new Set(walls).size, walls.join(' | ')).toBe(walls.length);
        // Nothing is lost either: every wall time croner would fire appears once.
        const croner = new Cron(expr, { timezone: tz, paused: true, mode: '5-or-6-parts' })
          .nextRuns(200, new Date(Date.parse(from) - 1))
          .filter((d) => d.getTime() < Date.parse(from) + 8 * 3_600_000);
        expect(new Set(walls)).toEqual(new Set(croner.map((d) => wall(d.getTime(), tz))));
      });
    }
  }

  it('an hour wildcard keeps its interval through both passes', () => {
    const { tz, from } = FALL_BACK[0]!;
    const runs = runsWithin('*/30 * * * *', tz, from, 6);
    // Every 30 minutes of real time, 12 in 6 hours, although two local half-hours repeat.
    expect(runs.length).toBe(12);
    for (let i = 1; i < runs.length; i++) expect(runs[i]! - runs[i - 1]!).toBe(30 * 60_000);
  });

  it('spring-forward is unchanged', () => {
    const tz = 'America/New_York';
    const from = Date.parse('2026-03-08T04:00:00Z');
    for (const expr of ['30 2 * * *', '30 1,2,3 * * *', '0 * * * *']) {
      const ours = nextRuns(compileCron(expr, tz), from, 5);
      const croner = new Cron(expr, { timezone: tz, paused: true }).nextRuns(5, new Date(from)).map((d) => d.getTime());
      expect(ours, expr).toEqual(croner);
    }
  });

  it('refuses an expression that never fires', () => {
    expect(() => compileCron('0 0 30 2 *', 'UTC')).toThrow(/body\.cron: '0 0 30 2 \*' never fires/);
    expect(() => compileCron('0 0 31 4 *', 'Europe/Berlin')).toThrow(/never fires/);
  });
});
