import { InvalidArgumentError } from 'commander';

/** Option parsers shared by every command: a bad value is a usage error (exit 2) naming the flag. */
export const int = (name: string) => (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n)) throw new InvalidArgumentError(`${name} must be an integer`);
  return n;
};

export const num = (name: string) => (v: string) => {
  const n = Number(v);
  if (!Number.isFinite(n)) throw new InvalidArgumentError(`${name} must be a number`);
  return n;
};

export const json = (name: string) => (v: string) => {
  try {
    return JSON.parse(v);
  } catch {
    throw new InvalidArgumentError(`${name} must be valid JSON`);
  }
};

/**
 * A throttle as `LIMIT/PERIOD` or `LIMIT/PERIOD+BURST` (PERIOD in seconds; `10/60+2`: 10 starts a
 * minute, 2 more at once after a quiet spell), or `none` (null: remove it). The API checks the range.
 */
export const throttleArg = (name: string) => (v: string) => {
  if (v === 'none') return '';
  const m = /^(\d+)\/(\d+)s?(?:\+(\d+))?$/.exec(v.trim());
  if (!m) throw new InvalidArgumentError(`${name} must be LIMIT/PERIOD_SECONDS[+BURST], e.g. 10/60+2, or none`);
  return { limit: Number(m[1]), period_seconds: Number(m[2]), burst: Number(m[3] ?? 0) };
};

/** A repeatable option's values, collected (also split at commas). */
export const collect = (v: string, previous: string[] | undefined) => [...(previous ?? []), ...v.split(',').filter((s) => s !== '')];
