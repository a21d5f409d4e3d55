/** The canary's vocabularies, defined once for the checker, the API, the CLI and the dashboard. */

/** A: must hold at every instant. B: must hold within the stated grace. */
export const TIERS = Object.freeze(['A', 'B'] as const);
export type Tier = (typeof TIERS)[number];

/** How bad a broken invariant is. */
export const SEVERITIES = Object.freeze(['critical', 'warning'] as const);
export type Severity = (typeof SEVERITIES)[number];

/** The canary as a whole: off, all invariants hold, some are violated, or no cycle finished within three intervals. */
export const CANARY_STATES = Object.freeze(['disabled', 'healthy', 'violated', 'stale'] as const);
export type CanaryState = (typeof CANARY_STATES)[number];

/** One invariant's last check. */
export const CHECK_STATUSES = Object.freeze(['ok', 'violated', 'skipped'] as const);
export type CheckStatus = (typeof CHECK_STATUSES)[number];

/** What an alert announces: an invariant started or stopped failing. */
export const VIOLATION_TRANSITIONS = Object.freeze(['violated', 'resolved'] as const);
export type ViolationTransition = (typeof VIOLATION_TRANSITIONS)[number];

/** Which violations a list shows (default open). */
export const VIOLATION_STATE_FILTERS = Object.freeze(['open', 'resolved', 'all'] as const);
export type ViolationStateFilter = (typeof VIOLATION_STATE_FILTERS)[number];

/** Where alerts are sent. */
export const ALERT_SINKS = Object.freeze(['webhook', 'slack'] as const);
export type AlertSinkKind = (typeof ALERT_SINKS)[number];

/** An alert's delivery: waiting (or retrying), sent, or given up. */
export const ALERT_STATUSES = Object.freeze(['pending', 'delivered', 'failed'] as const);
export type AlertStatus = (typeof ALERT_STATUSES)[number];
