/**
 * `new Date(ms).toISOString()`, the same text for every value, made without a Date for the
 * instants of the UTC day last formatted. An answer carries several times of one row, most of them
 * of the same day (created, queued, started, leased until, heartbeat, deadline), and every claim
 * and completion answers with them: each `toISOString` cost about 1.5 µs, several per task, a few
 * per cent of a W1-users task's server CPU (docs/benchmarks.md). A UTC day is exactly 86,400,000 ms
 * in JavaScript's time (no leap seconds), so an instant's day and time of day are arithmetic on ms.
 */
const DAY_MS = 86_400_000;
const MAX_TIME = 8.64e15;

/** The UTC day last formatted through Date: [start, start + DAY_MS), and its text up to and including the 'T'. */
let dayStart = Number.NaN;
let dayText = '';

const two = (n: number) => (n < 10 ? '0' : '') + n;
const three = (n: number) => (n < 10 ? '00' : n < 100 ? '0' : '') + n;

export function isoTime(ms: number): string {
  // Only whole ms: Date truncates a fraction (toward zero), which the arithmetic below would not.
  // NaN and out-of-range values fail the range test and reach Date, which throws as before.
  if (ms >= dayStart && ms < dayStart + DAY_MS && Number.isInteger(ms)) {
    let rest = ms - dayStart;
    const milli = rest % 1000;
    rest = (rest - milli) / 1000;
    const sec = rest % 60;
    rest = (rest - sec) / 60;
    const min = rest % 60;
    return `${dayText}${two((rest - min) / 60)}:${two(min)}:${two(sec)}.${three(milli)}Z`;
  }
  const text = new Date(ms).toISOString();
  // The last day Date can format (from 8.64e15, its greatest time) holds one valid ms: not kept.
  if (Number.isInteger(ms) && ms < MAX_TIME) {
    dayStart = ms - (((ms % DAY_MS) + DAY_MS) % DAY_MS);
    dayText = text.slice(0, text.indexOf('T') + 1);
  }
  return text;
}
