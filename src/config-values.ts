/**
 * How one environment variable is read for config.ts: unset and empty mean the default, and a bad
 * value throws a ConfigError naming the variable, what it accepts and (unless secret) what it got.
 */

/** The variables as given: the process environment, or a plain record in tests. */
export type Vars = Readonly<Record<string, string | undefined>>;

/** A bad BATON_* value. The message is one line: the variable, what it accepts, what it got. */
export class ConfigError extends Error {
  constructor(
    readonly variable: string,
    message: string,
  ) {
    super(message);
    this.name = 'ConfigError';
  }
}

/** The value, or undefined when unset or empty (an empty variable means "not set"). */
export function text(env: Vars, name: string): string | undefined {
  const raw = env[name];
  return raw === undefined || raw === '' ? undefined : raw;
}

/** A value quoted for an error line: control characters escaped, long values cut. */
export const shown = (raw: string) => `'${JSON.stringify(raw.length > 60 ? raw.slice(0, 60) + '…' : raw).slice(1, -1)}'`;

export interface NumberRule {
  min: number;
  max: number;
  /** Refuse `min` itself (a rate or a lifetime of 0 means nothing). */
  aboveMin?: boolean;
  /** Refuse fractions (ports, milliseconds). */
  integer?: boolean;
  /** What the variable accepts, for the message: "a number of days from 0 to 36500". */
  accepts: string;
}

/** Plain decimal digits only: no sign, exponent, hex or `Infinity`, so '1e3' is refused, not 1000. */
export function number(env: Vars, name: string, fallback: number, rule: NumberRule): number {
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  const t = raw.trim();
  const n = Number(t);
  const shape = rule.integer ? /^\d+$/ : /^\d+(\.\d+)?$/;
  if (!shape.test(t) || !Number.isFinite(n) || n < rule.min || n > rule.max || (rule.aboveMin && n === rule.min)) {
    throw new ConfigError(name, `${name} must be ${rule.accepts}; got ${shown(raw)}`);
  }
  return n;
}

export function oneOf<T extends string>(env: Vars, name: string, values: readonly T[], fallback: T): T {
  const raw = text(env, name);
  if (raw === undefined) return fallback;
  const v = raw.trim().toLowerCase() as T;
  if (!values.includes(v)) throw new ConfigError(name, `${name} must be one of ${values.join(', ')}; got ${shown(raw)}`);
  return v;
}

/** An http(s) URL. `secret`: the value is never echoed (an alert sink URL is itself a credential). */
export function httpUrl(env: Vars, name: string, opts: { secret?: boolean } = {}): string | undefined {
  const raw = text(env, name);
  if (raw === undefined) return undefined;
  let ok = false;
  try {
    ok = ['http:', 'https:'].includes(new URL(raw.trim()).protocol);
  } catch {
    ok = false;
  }
  if (!ok) throw new ConfigError(name, `${name} must be an http:// or https:// URL${opts.secret ? '' : `; got ${shown(raw)}`}`);
  return raw.trim();
}

/** Timers cannot wait longer than this: Node runs a longer setTimeout after 1 ms instead. */
export const MAX_TIMER_MS = 2_147_483_647;

/** A size in MiB (fractions allowed), as bytes. */
export function mib(env: Vars, name: string, fallback: number): number {
  const n = number(env, name, fallback, { min: 0, max: 1_048_576, aboveMin: true, accepts: 'MiB, a number above 0 (at most 1048576)' });
  return Math.round(n * 1024 * 1024);
}
