import { iso } from '../engine/views.ts';
import type { EngineEvents } from '../engine/events.ts';
import { startLoop, type LoopHandle } from '../engine/loop.ts';
import type { StoreAdapter } from '../store/adapter.ts';
import { alertSinksFromEnv, deliverAlertsOnce, type AlertSink } from './alerts.ts';
import { diagnose } from './catalogue.ts';
import { type CanaryTiming } from './graces.ts';
import { runCanaryOnce, type CycleReport } from './run.ts';

/**
 * How often the canary runs by default. A cycle reads the events since its checkpoints and the
 * non-terminal rows: its cost follows activity (and the backlog), not the age of the database.
 */
export const CANARY_INTERVAL_MS = 60_000;
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

export interface CanaryEnv {
  /** BATON_CANARY_INTERVAL_MS; 0 disables the timer in this process. Default 60 000. */
  intervalMs: number;
  sinks: AlertSink[];
}

export function canaryEnv(env: NodeJS.ProcessEnv = process.env): CanaryEnv {
  const raw = env.BATON_CANARY_INTERVAL_MS;
  const n = raw === undefined || raw === '' ? CANARY_INTERVAL_MS : Number(raw);
  return { intervalMs: Number.isFinite(n) && n >= 0 ? n : CANARY_INTERVAL_MS, sinks: alertSinksFromEnv(env) };
}

export interface CanaryOptions extends Partial<CanaryEnv> {
  store: StoreAdapter;
  nodeId: string;
  clock?: () => number;
  timing?: Partial<CanaryTiming>;
}

export type CanaryState = 'disabled' | 'healthy' | 'violated' | 'stale';

export interface ViolationFilter {
  invariant?: string;
  state?: 'open' | 'resolved' | 'all';
  agent?: string;
  severity?: 'critical' | 'warning';
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
    severity: v.severity as 'critical' | 'warning',
    reason: v.reason,
    diagnosis: diagnose(v.invariant, v.reason),
    detail: v.detail === null ? null : (JSON.parse(v.detail) as Record<string, string | number | null>),
    first_seen: iso(v.first_seen)!,
    last_seen: iso(v.last_seen)!,
    resolved_at: iso(v.resolved_at),
  };
}
export type ViolationView = ReturnType<typeof violationView>;

/** The canary of one process: its timer (under the lease), on-demand runs, alert delivery, status. */
export class Canary {
  readonly store: StoreAdapter;
  readonly intervalMs: number;
  readonly sinks: AlertSink[];
  private readonly nodeId: string;
  private readonly clock: () => number;
  private readonly timing: Partial<CanaryTiming>;
  private loops: LoopHandle[] = [];
  private first: Promise<unknown> | undefined;

  constructor(opts: CanaryOptions) {
    const env = canaryEnv();
    this.store = opts.store;
    this.nodeId = opts.nodeId;
    this.intervalMs = opts.intervalMs ?? env.intervalMs;
    this.sinks = opts.sinks ?? env.sinks;
    this.clock = opts.clock ?? Date.now;
    this.timing = opts.timing ?? {};
  }

  get enabled(): boolean {
    return this.intervalMs > 0;
  }

  /**
   * Run one cycle now, whoever holds the timer lease (recording is serialised in the database).
   * `full`: judge all history in bounded chunks instead of the activity since the checkpoints.
   */
  async runOnce(opts: { full?: boolean } = {}): Promise<CycleReport> {
    const report = await runCanaryOnce({ store: this.store, clock: this.clock, timing: this.timing, sinks: this.sinks, full: opts.full });
    if (report.transitions.length > 0) await this.deliverAlerts().catch(() => undefined);
    return report;
  }

  /**
   * The timer's tick: run a cycle only if this process holds (or takes) the lease. A cycle that
   * stopped at its per-cycle cap of events (after downtime, or a burst) is followed by more
   * cycles at once, each bounded, for up to CATCH_UP_SHARE of the interval.
   */
  async tick(): Promise<CycleReport | undefined> {
    if (!(await this.acquireLease())) return undefined;
    const until = Date.now() + CATCH_UP_SHARE * this.intervalMs;
    let report = await this.runOnce();
    while (report.ok && report.events && !report.events.caught_up && Date.now() < until) {
      // Renew between cycles, so catching up does not hand the timer to another process.
      if (!(await this.acquireLease())) return report;
      report = await this.runOnce();
    }
    // Renew again after the cycle, so a slow cycle does not hand the timer to another process.
    await this.acquireLease();
    return report;
  }

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

  /** Start the timer (first cycle at once) and the alert loop. No-op when disabled. */
  start(events: EngineEvents): void {
    if (!this.enabled || this.loops.length) return;
    this.first = this.tick().catch((error) => events.emit('loop:error', { loop: 'canary', error }));
    this.loops.push(startLoop('canary', () => this.tick(), this.intervalMs, events));
    this.loops.push(startLoop('canary-alerts', () => this.deliverAlerts(), Math.min(ALERT_LOOP_MS, this.intervalMs), events));
  }

  async stop(): Promise<void> {
    await Promise.all(this.loops.map((l) => l.stop()));
    this.loops = [];
    await this.first;
    // Hand the lease on at once rather than after it lapses.
    await this.store.db.updateTable('canary_state').set({ lease_owner: null, lease_expires_at: null }).where('id', '=', 'canary').where('lease_owner', '=', this.nodeId).execute().catch(() => undefined);
  }

  /**
   * disabled: no timer here and no fresh cycle from any process; stale: no cycle completed within
   * three intervals (or ever); violated: open violations; healthy otherwise.
   */
  async status() {
    const now = this.clock();
    const state = await this.store.db.selectFrom('canary_state').selectAll().where('id', '=', 'canary').executeTakeFirst();
    const open = await this.store.db.selectFrom('canary_violations').selectAll().where('resolved_at', 'is', null).orderBy('id', 'desc').limit(200).execute();
    const openCount = await this.store.db.selectFrom('canary_violations').select((eb) => eb.fn.countAll<number>().as('n')).where('resolved_at', 'is', null).executeTakeFirstOrThrow();
    const alerts = await this.store.db.selectFrom('canary_alerts').select(['status', (eb) => eb.fn.countAll<number>().as('n')]).groupBy('status').execute();
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
    return (await q.orderBy('id', 'desc').limit(f.limit ?? 50).execute()).map(violationView);
  }

  /** Alerts that could not be delivered (status failed), newest first. */
  async failedAlerts(limit = 20) {
    const rows = await this.store.db.selectFrom('canary_alerts').select(['id', 'invariant', 'transition', 'sink', 'attempts', 'last_error', 'created_at']).where('status', '=', 'failed').orderBy('id', 'desc').limit(limit).execute();
    return rows.map((a) => ({ id: Number(a.id), invariant: a.invariant, transition: a.transition, sink: a.sink, attempts: Number(a.attempts), last_error: a.last_error, created_at: iso(a.created_at)! }));
  }
}

