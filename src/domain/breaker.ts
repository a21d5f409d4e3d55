/**
 * The circuit breaker of an agent: plain rules, no I/O. The engine applies them on
 * the agent row inside the admission transaction (src/engine/transitions/admit.ts, which holds the
 * row locked) and inside the completion's transaction (src/engine/breaker.ts), so every process
 * sees one state.
 *
 * Its terms (counted failure; closed, open, half-open; the probe) are described in
 * docs/concepts.md#circuit-breaker, and the breaker in docs/concepts.md#glossary.
 */

export const BREAKER_STATES = Object.freeze(['closed', 'open', 'half_open'] as const);
export type BreakerState = (typeof BREAKER_STATES)[number];

/**
 * Failure classes a config may count. agent_error: the agent (or its push target) reported a
 * failure; timeout: it ran past its timeout; poisoned: its lease lapsed on every delivery.
 */
export const BREAKER_FAILURE_CLASSES = Object.freeze(['agent_error', 'timeout', 'poisoned'] as const);
export type BreakerFailureClass = (typeof BREAKER_FAILURE_CLASSES)[number];

/** Why the breaker changed state (the audit row's and the alert's `why`). */
export const BREAKER_CAUSES = Object.freeze([
  'consecutive_failures',
  'failure_ratio',
  'cooldown_elapsed',
  'probe_succeeded',
  'probe_failed',
  'closed_by_operator',
] as const);
export type BreakerCause = (typeof BREAKER_CAUSES)[number];

export interface BreakerConfig {
  /** Opens after this many counted failures in a row. */
  consecutive: number;
  /** …or when at least this share (0 < ratio ≤ 1) of the last `window` counted outcomes failed. */
  ratio: number;
  /** How many counted outcomes the ratio looks at; those not yet counted (a new agent) count as successes. */
  window: number;
  /** The first cool-down, in ms. */
  cooldown_ms: number;
  /** Each failed probe doubles the cool-down up to this, in ms. */
  max_cooldown_ms: number;
  /** The failure classes that count. */
  count: BreakerFailureClass[];
}

/**
 * For new agents: five failures in a row, or half of the last twenty, open it; thirty seconds
 * later one probe runs; each failed probe doubles the wait, up to ten minutes. An agent whose API
 * key expired then burns five tasks, not its backlog, and retries about every ten minutes.
 */
export const BREAKER_DEFAULTS: Readonly<BreakerConfig> = Object.freeze({
  consecutive: 5,
  ratio: 0.5,
  window: 20,
  cooldown_ms: 30_000,
  max_cooldown_ms: 600_000,
  count: [...BREAKER_FAILURE_CLASSES],
});

/** Bounds of a config (the API validates against them). `window` bounds the row's `breaker_recent`. */
export const BREAKER_LIMITS = Object.freeze({
  maxConsecutive: 10_000,
  maxWindow: 1_000,
  minCooldownMs: 1_000,
  maxCooldownMs: 7 * 24 * 3_600_000,
});

/** The agent columns the breaker lives in. */
export interface BreakerColumns {
  breaker_config: string | null;
  breaker_state: BreakerState;
  breaker_consecutive: number;
  breaker_recent: string;
  breaker_opened_at: number | null;
  breaker_until: number | null;
  breaker_probe_id: string | null;
  breaker_cooldown_ms: number | null;
}

export function parseBreakerConfig(json: string | null): BreakerConfig | null {
  return json === null ? null : (JSON.parse(json) as BreakerConfig);
}

/** Which outcome an ended execution is for the breaker: success, a failure class, or null (not counted ever). */
export function breakerOutcome(status: string, errorCode: string | null): 'success' | BreakerFailureClass | null {
  if (status === 'succeeded') return 'success';
  if (status !== 'failed') return null; // cancelled: never counted
  if (errorCode === 'backlog_expired') return null; // it never ran: says nothing about the agent
  if (errorCode === 'timeout') return 'timeout';
  if (errorCode === 'poisoned') return 'poisoned';
  return 'agent_error';
}

export interface BreakerChange {
  from: BreakerState;
  to: BreakerState;
  why: BreakerCause;
  /** Set when it opened: until when. */
  until: number | null;
  cooldown_ms: number | null;
}

export type BreakerPatch = Partial<Omit<BreakerColumns, 'breaker_config'>>;

/** The columns of a closed breaker with fresh counters. */
export const BREAKER_CLOSED: Readonly<BreakerPatch> = Object.freeze({
  breaker_state: 'closed',
  breaker_consecutive: 0,
  breaker_recent: '',
  breaker_opened_at: null,
  breaker_until: null,
  breaker_probe_id: null,
  breaker_cooldown_ms: null,
});

function opened(from: BreakerState, why: BreakerCause, cooldown: number, now: number) {
  const patch: BreakerPatch = {
    breaker_state: 'open',
    breaker_consecutive: 0,
    breaker_recent: '',
    breaker_opened_at: now,
    breaker_until: now + cooldown,
    breaker_probe_id: null,
    breaker_cooldown_ms: cooldown,
  };
  return { patch, change: { from, to: 'open' as const, why, until: now + cooldown, cooldown_ms: cooldown } };
}

/**
 * What one ended execution does to the breaker: the columns to write and the state change, if
 * any; null when nothing changes. Only the probe's outcome matters while open or half-open (the
 * executions still running when it opened end as they end, and say nothing new).
 */
export function breakerOnOutcome(
  row: BreakerColumns,
  executionId: string,
  outcome: 'success' | BreakerFailureClass | null,
  now: number,
): { patch: BreakerPatch; change: BreakerChange | null } | null {
  const cfg = parseBreakerConfig(row.breaker_config);
  if (!cfg) return null;
  const counted = outcome === 'success' || (outcome !== null && cfg.count.includes(outcome));
  if (row.breaker_state === 'closed') {
    if (!counted) return null;
    const failed = outcome !== 'success';
    const consecutive = failed ? Number(row.breaker_consecutive) + 1 : 0;
    const recent = windowAfter(row.breaker_recent, failed, cfg.window);
    if (consecutive >= cfg.consecutive) return opened('closed', 'consecutive_failures', cfg.cooldown_ms, now);
    if (countFailures(recent) >= cfg.ratio * cfg.window) return opened('closed', 'failure_ratio', cfg.cooldown_ms, now);
    return { patch: { breaker_consecutive: consecutive, breaker_recent: recent }, change: null };
  }
  if (row.breaker_state !== 'half_open' || row.breaker_probe_id !== executionId) return null;
  if (outcome === 'success')
    return { patch: BREAKER_CLOSED, change: { from: 'half_open', to: 'closed', why: 'probe_succeeded', until: null, cooldown_ms: null } };
  if (counted) {
    const cooldown = Math.min(2 * Number(row.breaker_cooldown_ms ?? cfg.cooldown_ms), cfg.max_cooldown_ms);
    return opened('half_open', 'probe_failed', cooldown, now);
  }
  return { patch: { breaker_probe_id: null }, change: null }; // the probe said nothing: take another
}

const countFailures = (recent: string) => recent.split('').filter((c) => c === '1').length;

/**
 * The window (`breaker_recent`) a new agent's breaker starts with: full of successes (windowAfter),
 * so its completions take the fast path from the first.
 */
export function freshWindow(config: Pick<BreakerConfig, 'window'>): string {
  return '0'.repeat(config.window);
}

/**
 * The window (`breaker_recent`) after one more counted outcome: the last `window` outcomes, those
 * it has not seen (a breaker just closed or reopened, counts started afresh, an agent made before
 * this rule) counted as successes. So it is always full once counted: from then on a success with
 * no failure in the window writes nothing, and its completion takes the fast path
 * (src/domain/fast-paths.ts), as it would after `window` successes.
 */
function windowAfter(recent: string, failed: boolean, window: number): string {
  return (recent.padStart(window, '0') + (failed ? '1' : '0')).slice(-window);
}

/**
 * What the breaker lets admission do now. `probeRunning`: whether the recorded probe execution
 * is still running (the caller reads it; a probe put back in the queue or ended no longer blocks).
 * - hold: admit nothing (open until `until`, or half-open with its probe out).
 * - probe: admit at most one execution and record it as the probe.
 */
export function breakerAdmission(
  row: BreakerColumns,
  now: number,
  probeRunning: boolean,
): { hold: { until: number | null; probe_id: string | null } | null; probe: boolean } {
  if (row.breaker_config === null || row.breaker_state === 'closed') return { hold: null, probe: false };
  if (row.breaker_state === 'open') {
    if (now < Number(row.breaker_until)) return { hold: { until: Number(row.breaker_until), probe_id: null }, probe: false };
    return { hold: null, probe: true };
  }
  if (row.breaker_probe_id !== null && probeRunning) return { hold: { until: null, probe_id: row.breaker_probe_id }, probe: false };
  return { hold: null, probe: true };
}

/** The state to show: an open breaker whose cool-down is over is half-open, whether or not a claim looked yet. */
export function breakerShownState(row: BreakerColumns, now: number): BreakerState {
  if (row.breaker_state === 'open' && now >= Number(row.breaker_until)) return 'half_open';
  return row.breaker_state;
}

/** The numeric state for the `baton_agent_breaker_state` gauge: 0 closed (or off), 1 open, 2 half-open. */
export const BREAKER_GAUGE: Readonly<Record<BreakerState, number>> = Object.freeze({ closed: 0, open: 1, half_open: 2 });

/** The invariant column of a breaker's canary_alerts rows (they ride the canary's sinks and delivery loop). */
export const BREAKER_ALERT = 'agent.breaker';

/** The body one alert sink receives for a breaker change: names, states and times only. */
export function breakerAlertBody(
  sink: 'webhook' | 'slack',
  agent: string,
  c: BreakerChange,
  actor: string,
  at: number,
): Record<string, unknown> {
  const until = c.until === null ? null : new Date(c.until).toISOString();
  if (sink === 'slack') {
    const icon = c.to === 'closed' ? ':large_green_circle:' : c.to === 'open' ? ':red_circle:' : ':large_yellow_circle:';
    const tail = c.to === 'open' ? ` until ${until}` : '';
    return { text: `${icon} Baton: agent ${agent} circuit breaker ${c.from} → ${c.to} (${c.why})${tail}` };
  }
  return {
    event: `agent.breaker.${c.to}`,
    agent,
    from: c.from,
    to: c.to,
    why: c.why,
    until,
    cooldown_ms: c.cooldown_ms,
    actor,
    at: new Date(at).toISOString(),
  };
}
