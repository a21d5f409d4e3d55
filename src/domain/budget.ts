/**
 * Budgets: per-agent limits on spending per time window. Plain data and pure
 * helpers; the ledger lives in `agent_budget_ledger`, the engine writes it in
 * the completion's transaction (src/engine/budget.ts) and admission reads it under the agent
 * lock (src/engine/transitions/admit.ts).
 *
 * Its terms (metric, window, spent) are described in docs/concepts.md#budgets, and the budget in
 * docs/concepts.md#glossary.
 */

export const BUDGET_METRICS = Object.freeze(['cost_usd', 'total_tokens', 'run_seconds'] as const);
export type BudgetMetric = (typeof BUDGET_METRICS)[number];
export const BUDGET_WINDOWS = Object.freeze(['minute', 'hour', 'day', 'month'] as const);
export type BudgetWindow = (typeof BUDGET_WINDOWS)[number];

/** At this share of a limit an alert fires, once per window (the ledger row remembers it). */
export const BUDGET_ALERT_RATIO = 0.8;
/** Limits one budget may hold: one per (metric, window) pair. */
export const BUDGET_MAX_LIMITS = BUDGET_METRICS.length * BUDGET_WINDOWS.length;

export interface BudgetLimit {
  metric: BudgetMetric;
  window: BudgetWindow;
  /** Spending allowed per window: dollars, tokens or seconds. */
  limit: number;
}
export interface Budget {
  /** IANA time zone the windows start in (default UTC). */
  time_zone?: string;
  limits: BudgetLimit[];
}

/** One ledger row's counters, as numbers. */
export interface WindowSpend {
  window_kind: BudgetWindow;
  window_start: number;
  cost_usd: number;
  total_tokens: number;
  run_ms: number;
  alerted_at: number | null;
}

/** What one completion adds to its agent's windows. */
export interface Spend {
  cost_usd: number;
  total_tokens: number;
  run_ms: number;
}

/** A valid IANA zone name (or UTC)? Intl knows them; an unknown name throws RangeError. */
export function isTimeZone(tz: string): boolean {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: tz });
    return true;
  } catch {
    return false;
  }
}

export function parseBudget(json: string | null | undefined): Budget | null {
  if (json === null || json === undefined) return null;
  const b = JSON.parse(json) as Budget;
  return b.limits.length === 0 ? null : b;
}

/** The window kinds a budget counts in, each once. */
export const budgetWindows = (b: Budget): BudgetWindow[] => [...new Set(b.limits.map((l) => l.window))];

/**
 * The most one completion may report. The API refuses more (400 naming the field); a push
 * target's answer is not validated by it, so spendOf caps what it counts. A window's ledger row
 * (tokens a 64-bit integer, cost a double) then holds millions of such completions without overflow.
 */
export const USAGE_MAX = Object.freeze({ tokens: 1_000_000_000_000, cost_usd: 1_000_000_000 });

const num = (v: unknown, max: number) => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? Math.min(v, max) : 0);
const tokenCount = (v: unknown) => Math.round(num(v, USAGE_MAX.tokens));

/**
 * Decimals each metric is counted and shown in: cost in micro-dollars, run time in milliseconds.
 * The ledger adds doubles, and binary fractions drift (0.4 + 0.4 + 0.4 is 1.2000000000000002):
 * every spending Baton compares or shows is rounded to these first, so the API, CLI, MCP, the
 * dashboard and admission all see the same 1.2.
 */
export const SPEND_DECIMALS: Readonly<Record<BudgetMetric, number>> = Object.freeze({ cost_usd: 6, total_tokens: 0, run_seconds: 3 });

/** `v` rounded to the metric's decimals (SPEND_DECIMALS). */
export function roundSpend(metric: BudgetMetric, v: number): number {
  const scale = 10 ** SPEND_DECIMALS[metric];
  return Math.round(v * scale) / scale;
}

/** The spending a completion reports: usage's cost (micro-dollars) and tokens (input + output when no total, whole numbers), and its run time. */
export function spendOf(usage: unknown, durationMs: number | null): Spend {
  const u = (usage && typeof usage === 'object' ? usage : {}) as Record<string, unknown>;
  const tokens = u.total_tokens !== undefined ? tokenCount(u.total_tokens) : tokenCount(u.input_tokens) + tokenCount(u.output_tokens);
  const cost = roundSpend('cost_usd', num(u.cost_usd, USAGE_MAX.cost_usd));
  return { cost_usd: cost, total_tokens: tokens, run_ms: Math.max(0, Number(durationMs ?? 0)) };
}

/** A window's spending on one metric, rounded to its decimals: what is compared with a limit and shown. */
export const spentOn = (metric: BudgetMetric, w: Pick<WindowSpend, 'cost_usd' | 'total_tokens' | 'run_ms'>): number =>
  roundSpend(
    metric,
    metric === 'cost_usd' ? Number(w.cost_usd) : metric === 'total_tokens' ? Number(w.total_tokens) : Number(w.run_ms) / 1000,
  );

// ── windows on a time zone's wall clock ─────────────────────────────────────

const formatters = new Map<string, Intl.DateTimeFormat>();
/** Intl formatters are costly to build; one per zone, kept. */
function formatter(tz: string): Intl.DateTimeFormat {
  let f = formatters.get(tz);
  if (!f) {
    f = new Intl.DateTimeFormat('en-US', {
      timeZone: tz,
      hourCycle: 'h23',
      year: 'numeric',
      month: 'numeric',
      day: 'numeric',
      hour: 'numeric',
      minute: 'numeric',
      second: 'numeric',
    });
    formatters.set(tz, f);
  }
  return f;
}

/** The zone's wall clock at `t`, read as if it were UTC (so arithmetic on it is plain). */
function wallAsUtc(t: number, tz: string): number {
  const p: Record<string, number> = {};
  for (const part of formatter(tz).formatToParts(t)) if (part.type !== 'literal') p[part.type] = Number(part.value);
  return Date.UTC(p.year!, p.month! - 1, p.day!, p.hour!, p.minute!, p.second!);
}

/** The instant whose wall clock in `tz` is `wall` (a gap at a DST change resolves to just after it). */
function instantOf(wall: number, tz: string): number {
  let t = wall - (wallAsUtc(wall, tz) - wall);
  // A second pass settles the offset when the first guess crossed a DST change.
  t = wall - (wallAsUtc(t, tz) - t);
  return t;
}

function truncate(wall: number, w: BudgetWindow): number {
  const d = new Date(wall);
  if (w === 'minute') return wall - (((wall % 60_000) + 60_000) % 60_000);
  if (w === 'hour') return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate(), d.getUTCHours());
  if (w === 'day') return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate());
  return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1);
}

function nextWall(wallStart: number, w: BudgetWindow): number {
  const d = new Date(wallStart);
  if (w === 'minute') return wallStart + 60_000;
  if (w === 'hour') return wallStart + 3_600_000;
  if (w === 'day') return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate() + 1);
  return Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1);
}

/** The window holding `now`: its start (the ledger key) and when it ends (`resets_at`), epoch ms. */
export function windowOf(now: number, w: BudgetWindow, tz = 'UTC'): { start: number; end: number } {
  if (tz === 'UTC') {
    const start = truncate(now, w);
    return { start, end: nextWall(start, w) };
  }
  const wallStart = truncate(wallAsUtc(now, tz), w);
  return { start: instantOf(wallStart, tz), end: instantOf(nextWall(wallStart, w), tz) };
}

/** One limit's state now, given the ledger rows of the current windows. */
export interface LimitStatus extends BudgetLimit {
  spent: number;
  remaining: number;
  window_start: number;
  resets_at: number;
}

export function budgetStatus(b: Budget, rows: WindowSpend[], now: number): LimitStatus[] {
  return b.limits.map((l) => {
    const { start, end } = windowOf(now, l.window, b.time_zone);
    const row = rows.find((r) => r.window_kind === l.window && Number(r.window_start) === start);
    const spent = row ? spentOn(l.metric, row) : 0;
    return { ...l, spent, remaining: roundSpend(l.metric, Math.max(0, l.limit - spent)), window_start: start, resets_at: end };
  });
}

/** The first limit that is spent (spending reached it), or null: admission may go on. */
export function firstSpent(b: Budget | null, rows: WindowSpend[], now: number): LimitStatus | null {
  if (!b) return null;
  return budgetStatus(b, rows, now).find((s) => s.spent >= s.limit) ?? null;
}
