import { DEFAULTS } from '../config.ts';
import type { CanaryState, Severity, ViolationStateFilter } from '../domain/canary.ts';
import { iso } from '../engine/views.ts';
import type { EngineContext } from '../engine/context.ts';
import type { Lease } from '../engine/loop.ts';
import type { StoreAdapter } from '../store/adapter.ts';
import { deliverAlertsOnce, type AlertSink } from './alerts.ts';
import { CATALOGUE, diagnose, isActivity } from './catalogue.ts';
import { type CanaryTiming } from './graces.ts';
import { EVENTS_READ_BUDGET_MS } from './events.ts';
import { runCanaryOnce, type CycleReport } from './run.ts';
import type { Invariant } from './types.ts';

/** The invariants that read the event log: what a catch-up cycle judges. */
const ACTIVITY = CATALOGUE.filter(isActivity);

/** How often the canary runs by default (why: DEFAULTS.canaryIntervalMs in src/config.ts). */
export const CANARY_INTERVAL_MS = DEFAULTS.canaryIntervalMs;
/** A tick that finds the canary behind runs more cycles for at most this share of the interval. */
export const CATCH_UP_SHARE = 0.5;
/** How often pending alerts are (re)tried. */
export const ALERT_LOOP_MS = 5_000;
/** No cycle completed for this many intervals: the canary is `stale` (a dead canary must not look healthy). */
export const STALE_AFTER_INTERVALS = 3;
/**
 * The timer lease: the process holding it runs the cycles. A holder renews it every cycle; a dead
 * holder's lease lapses after 1.5 intervals, and another process's next tick (≤ 1.2 intervals
 * with jitter) takes over, so a takeover completes inside the 3-interval staleness window.
 */
export const LEASE_INTERVALS = 1.5;

export interface CanaryOptions {
  /** The timer's interval; 0 disables the timer in this process (default CANARY_INTERVAL_MS; `baton up`: BATON_CANARY_INTERVAL_MS). */
  intervalMs?: number;
  /** Where alerts go (default none; `baton up`: BATON_ALERT_WEBHOOK_URL, BATON_ALERT_SLACK_URL). */
  sinks?: AlertSink[];
  store: StoreAdapter;
  nodeId: string;
  /** Default the store's clock (StoreAdapter.now). */
  clock?: () => number;
  timing?: Partial<CanaryTiming>;
  /** See CanaryRunOptions.readBudgetMs (default EVENTS_READ_BUDGET_MS). */
  readBudgetMs?: number;
}

export type { CanaryState };

export interface ViolationFilter {
  invariant?: string;
  state?: ViolationStateFilter;
  agent?: string;
  severity?: Severity;
  subject?: string;
  limit?: number;
  /** Keyset cursor: violations with a smaller id. */
  before?: number;
}

/** A stored violation as the API shows it: ids, reason codes and the diagnosis. */
export function violationView(v: {
  id: number;
  invariant: string;
  subject: string;
  agent: string | null;
  tier: string;
  severity: string;
  reason: string;
  detail: string | null;
  first_seen: number;
  last_seen: number;
  resolved_at: number | null;
}) {
  return {
    id: Number(v.id),
    invariant: v.invariant,
    subject: v.subject,
    agent: v.agent,
    tier: v.tier as 'A' | 'B',
    severity: v.severity as Severity,
    reason: v.reason,
    diagnosis: diagnose(v.invariant, v.reason),
    detail: v.detail === null ? null : (JSON.parse(v.detail) as Record<string, string | number | null>),
    first_seen: iso(v.first_seen)!,
    last_seen: iso(v.last_seen)!,
    resolved_at: iso(v.resolved_at),
  };
}
export type ViolationView = ReturnType<typeof violationView>;

/**
 * A canary with no timer over the engine's store: it reports the stored state and runs cycles on
 * demand. The API's default when `baton up` passes none (tests), so the API needs no store.
 */
export function reportingCanary(engine: EngineContext & { readonly nodeId: string }): Canary {
  return new Canary({ store: engine.store, nodeId: engine.nodeId, intervalMs: 0 });
}

/**
 * The canary of one process: its passes (a cycle under the timer lease, alert delivery), on-demand
 * runs, status and violations. `baton up` runs the passes on the loop helper (src/server/up.ts).
 */
export class Canary {
  readonly store: StoreAdapter;
  readonly intervalMs: number;
  readonly sinks: AlertSink[];
  private readonly nodeId: string;
  private readonly clock: () => number;
  private readonly timing: Partial<CanaryTiming>;
  private readonly readBudgetMs: number;
  /** The timer lease (a row of canary_state): the cycle pass is leader-only under it. */
  readonly lease: Lease = { acquire: () => this.acquireLease(), release: () => this.releaseLease() };

  constructor(opts: CanaryOptions) {
    this.store = opts.store;
    this.nodeId = opts.nodeId;
    this.intervalMs = opts.intervalMs ?? CANARY_INTERVAL_MS;
    this.sinks = opts.sinks ?? [];
    this.clock = opts.clock ?? (() => opts.store.now());
    this.timing = opts.timing ?? {};
    this.readBudgetMs = opts.readBudgetMs ?? EVENTS_READ_BUDGET_MS;
  }

  get enabled(): boolean {
    return this.intervalMs > 0;
  }

  /**
   * Run one cycle now, whoever holds the timer lease (recording is serialised in the database).
   * `full`: judge all history in bounded chunks instead of the activity since the checkpoints.
   */
  async runOnce(opts: { full?: boolean; invariants?: readonly Invariant[] } = {}): Promise<CycleReport> {
    const report = await runCanaryOnce({
      store: this.store,
      clock: this.clock,
      timing: this.timing,
      readBudgetMs: this.readBudgetMs,
      sinks: this.sinks,
      full: opts.full,
      invariants: opts.invariants,
    });
    if (report.transitions.length > 0) await this.deliverAlerts().catch(() => undefined);
    return report;
  }

  /** The timer's tick as one call: a cycle pass only if this process holds (or takes) the lease. */
  async tick(): Promise<CycleReport | undefined> {
    if (!(await this.acquireLease())) return undefined;
    return this.cycleOnce();
  }

  /**
   * The cycle pass (leader-only: its loop holds `lease`). A cycle that stopped at its per-cycle
   * cap of events (after downtime, or a burst) is followed by more cycles at once, each bounded,
   * for up to CATCH_UP_SHARE of the interval — or until `stopping` is aborted (the process is
   * shutting down: the checkpoint keeps what was read, and the next leader goes on from it).
   */
  async cycleOnce(stopping?: AbortSignal): Promise<CycleReport> {
    const until = performance.now() + CATCH_UP_SHARE * this.intervalMs;
    let report = await this.runOnce();
    while (report.ok && report.events && !report.events.caught_up && performance.now() < until && !stopping?.aborted) {
      // Renew between cycles, so catching up does not hand the timer to another process.
      if (!(await this.acquireLease())) return report;
      // Only the event log is behind: the state invariants were judged a moment ago, over every
      // live row. Judged again in each of these cycles, they held a snapshot over the whole
      // backlog back to back for half the interval (seconds a cycle with a deep backlog), and
      // PostgreSQL could prune no row version changed meanwhile.
      report = await this.runOnce({ invariants: ACTIVITY });
    }
    // Renew again after the cycle, so a slow cycle does not hand the timer to another process.
    await this.acquireLease();
    return report;
  }

  /** The alert pass (every process): (re)try pending alerts. */
  deliverAlerts() {
    return deliverAlertsOnce(this.store, this.sinks, this.clock);
  }

  async acquireLease(): Promise<boolean> {
    const now = this.clock();
    const r = await this.store.db
      .updateTable('canary_state')
      .set({ lease_owner: this.nodeId, lease_expires_at: now + Math.round(LEASE_INTERVALS * this.intervalMs) })
      .where('id', '=', 'canary')
      .where((eb) => eb.or([eb('lease_owner', 'is', null), eb('lease_owner', '=', this.nodeId), eb('lease_expires_at', '<', now)]))
      .executeTakeFirst();
    return Number(r.numUpdatedRows) === 1;
  }

  /** Hand the lease on at once rather than after it lapses (its loop does this on stop). */
  async releaseLease(): Promise<void> {
    await this.store.db
      .updateTable('canary_state')
      .set({ lease_owner: null, lease_expires_at: null })
      .where('id', '=', 'canary')
      .where('lease_owner', '=', this.nodeId)
      .execute();
  }

  /**
   * disabled: no timer here and no fresh cycle from any process; stale: no cycle completed within
   * three intervals (or ever); violated: open violations; healthy otherwise.
   */
  async status() {
    const now = this.clock();
    const state = await this.store.db.selectFrom('canary_state').selectAll().where('id', '=', 'canary').executeTakeFirst();
    const open = await this.store.db
      .selectFrom('canary_violations')
      .selectAll()
      .where('resolved_at', 'is', null)
      .orderBy('id', 'desc')
      .limit(200)
      .execute();
    const openCount = await this.store.db
      .selectFrom('canary_violations')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('resolved_at', 'is', null)
      .executeTakeFirstOrThrow();
    // The checkpoints (one per invariant that follows the event log: a handful of rows) and the
    // newest event (a primary-key seek): how far the cycles have read.
    const checkpoint = await this.store.db
      .selectFrom('canary_checkpoints')
      .select((eb) => eb.fn.min<number>('event_id').as('event_id'))
      .executeTakeFirst();
    const latest = await this.store.db
      .selectFrom('execution_events')
      .select((eb) => eb.fn.max<number>('id').as('id'))
      .executeTakeFirst();
    const alerts = await this.store.db
      .selectFrom('canary_alerts')
      .select(['status', (eb) => eb.fn.countAll<number>().as('n')])
      .groupBy('status')
      .execute();
    const interval = this.intervalMs > 0 ? this.intervalMs : CANARY_INTERVAL_MS;
    const staleAfter = STALE_AFTER_INTERVALS * interval;
    const last = state?.last_completed_at === null || state?.last_completed_at === undefined ? null : Number(state.last_completed_at);
    const fresh = last !== null && now - last <= staleAfter;
    const status: CanaryState = !this.enabled && !fresh ? 'disabled' : !fresh ? 'stale' : Number(openCount.n) > 0 ? 'violated' : 'healthy';
    const count = (s: string) => Number(alerts.find((a) => a.status === s)?.n ?? 0);
    return {
      status,
      enabled: this.enabled,
      interval_ms: this.intervalMs,
      stale_after_ms: staleAfter,
      last_started_at: iso(state?.last_started_at),
      last_completed_at: iso(last),
      last_ok: state?.last_ok === null || state?.last_ok === undefined ? null : Number(state.last_ok) === 1,
      cycles: Number(state?.cycles ?? 0),
      lease_owner: state?.lease_expires_at && Number(state.lease_expires_at) >= now ? state.lease_owner : null,
      open_count: Number(openCount.n),
      checkpoint: {
        event_id: checkpoint?.event_id == null ? null : Number(checkpoint.event_id),
        latest_event_id: latest?.id == null ? null : Number(latest.id),
      },
      open: open.map(violationView),
      alerts: { pending: count('pending'), delivered: count('delivered'), failed: count('failed') },
    };
  }

  async violations(f: ViolationFilter) {
    let q = this.store.db.selectFrom('canary_violations').selectAll();
    if (f.invariant) q = q.where('invariant', '=', f.invariant);
    if (f.state === 'open' || f.state === undefined) q = q.where('resolved_at', 'is', null);
    if (f.state === 'resolved') q = q.where('resolved_at', 'is not', null);
    if (f.agent) q = q.where('agent', '=', f.agent);
    if (f.severity) q = q.where('severity', '=', f.severity);
    if (f.subject) q = q.where('subject', '=', f.subject);
    if (f.before !== undefined) q = q.where('id', '<', f.before);
    return (
      await q
        .orderBy('id', 'desc')
        .limit(f.limit ?? 50)
        .execute()
    ).map(violationView);
  }

  /** Alerts that could not be delivered (status failed), newest first. */
  async failedAlerts(limit = 20) {
    const rows = await this.store.db
      .selectFrom('canary_alerts')
      .select(['id', 'invariant', 'transition', 'sink', 'attempts', 'last_error', 'created_at'])
      .where('status', '=', 'failed')
      .orderBy('id', 'desc')
      .limit(limit)
      .execute();
    return rows.map((a) => ({
      id: Number(a.id),
      invariant: a.invariant,
      transition: a.transition,
      sink: a.sink,
      attempts: Number(a.attempts),
      last_error: a.last_error,
      created_at: iso(a.created_at)!,
    }));
  }
}
