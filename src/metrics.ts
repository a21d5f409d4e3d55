/**
 * Prometheus metrics (prom-client). Two registries, merged on every scrape of GET /metrics:
 *
 * - a process-wide one (this module): process metrics and the counters other components
 *   increment through the functions below — import and call them, never create metrics with
 *   these names elsewhere;
 * - one per node (createNodeMetrics): HTTP, engine and canary metrics bound to that node's
 *   engine and store. Engine code never imports this module: what the engine's passes do
 *   reaches the counters through its events (`scheduler:fired`, `reaper:reaped`, `loop:error`…). Gauges that need the database are computed when scraped, from a few
 *   grouped counts cached for `DB_GAUGE_TTL_MS`, never on the request path.
 *
 * For components above the engine:
 *   countWebhook(outcome)                               — one per webhook request answered
 *   countConnectionRefused(via)                         — one per connection or request over the per-address limit
 * Outcomes and reasons are short fixed codes (e.g. 'accepted', 'already_running',
 * 'bad_signature', 'overlap'), never ids: each distinct value is a new time series.
 */
import { BREAKER_GAUGE, type BreakerState } from './domain/breaker.ts';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import { ALERT_STATUSES } from './domain/canary.ts';
import type { Fired } from './domain/outcomes.ts';
import type { Engine } from './engine/engine.ts';
import { liveKeyCounts } from './engine/flow-keys-read.ts';
import { liveCountsByAgent } from './engine/live-counts.ts';
import type { StoreAdapter } from './store/adapter.ts';
import { RETENTION_DEFAULTS, type RetentionEnv } from './config.ts';
import { readHistoryStats } from './retention/stats.ts';
import { budgetStatus, parseBudget } from './domain/budget.ts';
import { readCurrentWindows } from './engine/budget.ts';

export const processRegistry = new Registry();
collectDefaultMetrics({ register: processRegistry });

const webhookRequests = new Counter({
  name: 'baton_webhook_requests_total',
  help: 'Webhook requests answered, by outcome',
  labelNames: ['outcome'] as const,
  registers: [processRegistry],
});

export function countWebhook(outcome: string): void {
  webhookRequests.inc({ outcome });
}

const connectionsRefused = new Counter({
  name: 'baton_connections_refused_total',
  help: 'Connections closed (via="socket") or requests answered 429 (via="proxy") over the per-address limit',
  labelNames: ['via'] as const,
  registers: [processRegistry],
});

/** One connection or request refused over BATON_MAX_CONNECTIONS_PER_ADDRESS. */
export function countConnectionRefused(via: 'socket' | 'proxy'): void {
  connectionsRefused.inc({ via });
}

/** Database-derived gauges are recomputed at most this often, however often Prometheus scrapes. */
export const DB_GAUGE_TTL_MS = 5_000;

/** Seconds, for waits from milliseconds to a day. */
const WAIT_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 86_400];

interface DbStats {
  /** Live executions (queued, running) per agent: never a count over history. */
  executions: Array<{ agent: string; status: 'queued' | 'running'; n: number }>;
  agents: Array<{
    name: string;
    max_parallel: number;
    max_backlog: number;
    paused_at: number | null;
    breaker_state: BreakerState;
    lapse_hold_at: number | null;
  }>;
  violations: Array<{ invariant: string; severity: string; n: number }>;
  alerts: Array<{ status: string; n: number }>;
  canaryCompletedAt: number | null;
  /** Live keys per agent (a count: one series per agent, never one per key). */
  liveKeys: Map<string, number>;
}

async function readDbStats(store: StoreAdapter): Promise<DbStats> {
  // Long reads go to the reader (a worker-thread connection on SQLite), off the writer's path.
  const db = store.reader;
  const live = await liveCountsByAgent(db);
  const executions = [...live].flatMap(([agent, c]) => [
    { agent, status: 'running' as const, n: c.running },
    { agent, status: 'queued' as const, n: c.queued },
  ]);
  const agents = await db
    .selectFrom('agents')
    .select(['name', 'max_parallel', 'max_backlog', 'paused_at', 'breaker_state', 'lapse_hold_at'])
    .execute();
  const violations = await db
    .selectFrom('canary_violations')
    .select(['invariant', 'severity', (eb) => eb.fn.countAll<number>().as('n')])
    .where('resolved_at', 'is', null)
    .groupBy(['invariant', 'severity'])
    .execute();
  const alerts = await db
    .selectFrom('canary_alerts')
    .select(['status', (eb) => eb.fn.countAll<number>().as('n')])
    .groupBy('status')
    .execute();
  const state = await db.selectFrom('canary_state').select('last_completed_at').where('id', '=', 'canary').executeTakeFirst();
  return {
    executions,
    agents,
    violations: violations.map((r) => ({ ...r, n: Number(r.n) })),
    alerts: alerts.map((r) => ({ ...r, n: Number(r.n) })),
    liveKeys: await liveKeyCounts(db),
    canaryCompletedAt: state?.last_completed_at === null || state?.last_completed_at === undefined ? null : Number(state.last_completed_at),
  };
}

/** Every budget limit's spent ratio now: agents with a budget only, one primary-key seek of the ledger each. */
async function readBudgetRatios(engine: Engine): Promise<Array<{ agent: string; metric: string; window: string; ratio: number }>> {
  const db = engine.store.reader;
  const agents = await db.selectFrom('agents').select(['name', 'budget']).where('budget', 'is not', null).execute();
  const now = engine.now();
  const out: Array<{ agent: string; metric: string; window: string; ratio: number }> = [];
  for (const a of agents) {
    const budget = parseBudget(a.budget);
    if (!budget) continue;
    for (const l of budgetStatus(budget, await readCurrentWindows(db, a.name, budget, now), now))
      out.push({ agent: a.name, metric: l.metric, window: l.window, ratio: l.spent / l.limit });
  }
  return out;
}

export interface NodeMetrics {
  registry: Registry;
  /** Record one answered HTTP request (route pattern, never the raw URL). */
  observeHttp(method: string, route: string, status: number, seconds: number): void;
  /** Prometheus text for this node plus the process-wide metrics. */
  render(): Promise<{ contentType: string; body: string }>;
  close(): void;
}

/** `retention`: the settings the history gauges report (`baton up`'s, from the environment). */
export function createNodeMetrics(engine: Engine, retention: RetentionEnv = { ...RETENTION_DEFAULTS, archiveDir: undefined }): NodeMetrics {
  const registry = new Registry();
  registerDbGauges(registry, engine);
  registerHistoryGauges(registry, engine.store, retention);
  const events = countEngineEvents(registry, engine);

  return {
    registry,
    observeHttp(method, route, status, seconds) {
      events.httpDuration.observe({ method, route, status_code: String(status) }, seconds);
    },
    async render() {
      const merged = Registry.merge([processRegistry, registry]);
      return { contentType: merged.contentType, body: await merged.metrics() };
    },
    close() {
      events.off();
    },
  };
}

/**
 * Gauges filled at scrape time from one database read, shared by all of them and cached for
 * `ttlMs` however often Prometheus scrapes. A failed read leaves them empty (baton_store_up says so).
 */
function cachedGauges<T>(registry: Registry, read: () => Promise<T>, ttlMs: number) {
  let cached: { at: number; value: Promise<T | undefined> } | undefined;
  const current = () => {
    const now = Date.now();
    if (!cached || now - cached.at > ttlMs) cached = { at: now, value: read().catch(() => undefined) };
    return cached.value;
  };
  const gauge = <L extends string>(name: string, help: string, labelNames: readonly L[], fill: (g: Gauge<L>, v: T) => void) =>
    new Gauge<L>({
      name,
      help,
      labelNames,
      registers: [registry],
      async collect() {
        const v = await current();
        this.reset();
        if (v !== undefined) fill(this, v);
      },
    });
  return { current, gauge };
}

/** Gauges of live work, agents and the canary, from one cached database read (budgets: a second). */
function registerDbGauges(registry: Registry, engine: Engine): void {
  const store = engine.store;
  const { current: stats, gauge: dbGauge } = cachedGauges(registry, () => readDbStats(store), DB_GAUGE_TTL_MS);

  new Gauge({
    name: 'baton_store_up',
    help: '1 when the last database-derived gauge refresh succeeded',
    registers: [registry],
    async collect() {
      this.set((await stats()) ? 1 : 0);
    },
  });
  dbGauge(
    'baton_executions',
    'Live executions by agent and status (queued, running); finished ones are history, not counted here',
    ['agent', 'status'],
    (g, s) => {
      for (const r of s.executions) g.set({ agent: r.agent, status: r.status }, r.n);
    },
  );
  // Live counts by status and agent, indexed once per read: a search of the rows per agent made a
  // scrape quadratic in agents (thousands of agents held the event loop too long).
  const counts = new WeakMap<DbStats, Map<string, number>>();
  const countOf = (s: DbStats, agent: string, status: string) => {
    let byKey = counts.get(s);
    if (!byKey) counts.set(s, (byKey = new Map(s.executions.map((r) => [`${r.status}\u0000${r.agent}`, r.n]))));
    return byKey.get(`${status}\u0000${agent}`) ?? 0;
  };
  dbGauge('baton_agent_running', 'Running executions (seats in use) per agent', ['agent'], (g, s) => {
    for (const a of s.agents) g.set({ agent: a.name }, countOf(s, a.name, 'running'));
  });
  dbGauge('baton_agent_max_parallel', 'Seats per agent (max_parallel)', ['agent'], (g, s) => {
    for (const a of s.agents) g.set({ agent: a.name }, a.max_parallel);
  });
  dbGauge('baton_agent_queued', 'Queued executions per agent', ['agent'], (g, s) => {
    for (const a of s.agents) g.set({ agent: a.name }, countOf(s, a.name, 'queued'));
  });
  dbGauge('baton_agent_live_keys', 'Concurrency keys with a queued or running execution, per agent', ['agent'], (g, s) => {
    for (const a of s.agents) g.set({ agent: a.name }, s.liveKeys.get(a.name) ?? 0);
  });
  dbGauge('baton_agent_paused', '1 while the agent is paused (it admits nothing until resumed)', ['agent'], (g, s) => {
    for (const a of s.agents) g.set({ agent: a.name }, a.paused_at === null ? 0 : 1);
  });
  dbGauge(
    'baton_agent_lapse_hold',
    '1 while the agent is held after a shared-cause lapse (until a worker of it is seen)',
    ['agent'],
    (g, s) => {
      for (const a of s.agents) g.set({ agent: a.name }, a.lapse_hold_at === null ? 0 : 1);
    },
  );
  dbGauge('baton_agent_breaker_state', 'Circuit breaker per agent: 0 closed (or off), 1 open, 2 half-open', ['agent'], (g, s) => {
    for (const a of s.agents) g.set({ agent: a.name }, BREAKER_GAUGE[a.breaker_state]);
  });
  // Budgets: a separate read (agents with a budget, one ledger seek each), cached like the above.
  const { gauge: budgetGauge } = cachedGauges(registry, () => readBudgetRatios(engine), DB_GAUGE_TTL_MS);
  budgetGauge(
    'baton_agent_budget_spent_ratio',
    'Spending / limit per agent budget limit in its current window (>= 1: spent, the agent admits nothing until the window rolls)',
    ['agent', 'metric', 'window'],
    (g, rows) => {
      for (const r of rows) g.set({ agent: r.agent, metric: r.metric, window: r.window }, r.ratio);
    },
  );
  // Pools: a separate read (pools are few: one label each), cached like the above.
  const { gauge: poolGauge } = cachedGauges(registry, () => engine.pools.gauges(), DB_GAUGE_TTL_MS);
  poolGauge('baton_pool_in_use', "Seats in use per pool (its agents' running tasks)", ['pool'], (g, rows) => {
    for (const p of rows) g.set({ pool: p.name }, p.in_use);
  });
  poolGauge('baton_pool_max_parallel', 'Seats per pool (absent: no seat limit)', ['pool'], (g, rows) => {
    for (const p of rows) if (p.max_parallel !== null) g.set({ pool: p.name }, p.max_parallel);
  });
  dbGauge('baton_agent_max_backlog', 'Queued executions allowed per agent (max_backlog)', ['agent'], (g, s) => {
    for (const a of s.agents) g.set({ agent: a.name }, a.max_backlog);
  });
  dbGauge('baton_canary_violations_open', 'Open canary violations by invariant and severity', ['invariant', 'severity'], (g, s) => {
    for (const v of s.violations) g.set({ invariant: v.invariant, severity: v.severity }, v.n);
  });
  dbGauge('baton_canary_alerts', 'Canary alerts by delivery status (failed: could not be delivered)', ['status'], (g, s) => {
    for (const st of ALERT_STATUSES) g.set({ status: st }, s.alerts.find((a) => a.status === st)?.n ?? 0);
  });
  dbGauge('baton_canary_last_cycle_timestamp_seconds', 'When the last canary cycle completed (any process)', [], (g, s) => {
    if (s.canaryCompletedAt !== null) g.set(s.canaryCompletedAt / 1000);
  });
}

/** Gauges of history and retention. */
function registerHistoryGauges(registry: Registry, store: StoreAdapter, retention: RetentionEnv): void {
  // ── History and retention (src/retention): estimates from the catalogue and a few index reads,
  // cached for HISTORY_GAUGE_TTL_MS.
  const HISTORY_GAUGE_TTL_MS = 30_000;
  const { gauge: historyGauge } = cachedGauges(registry, () => readHistoryStats(store, retention), HISTORY_GAUGE_TTL_MS);
  historyGauge('baton_history_rows', 'Estimated rows of history tables (PostgreSQL reltuples; SQLite rowid span)', ['table'], (g, s) => {
    for (const [table, n] of Object.entries(s.rows)) if (n !== null) g.set({ table }, n);
  });
  historyGauge(
    'baton_history_bytes',
    'Database size in bytes (SQLite: file pages incl. free ones; PostgreSQL: tables with indexes and TOAST)',
    [],
    (g, s) => g.set(s.bytes),
  );
  historyGauge(
    'baton_history_free_bytes',
    'SQLite free pages in bytes (reusable; returned by incremental vacuum after a prune)',
    [],
    (g, s) => {
      if (s.free_bytes !== null) g.set(s.free_bytes);
    },
  );
  historyGauge('baton_history_oldest_age_seconds', 'Age of the oldest finished execution (completed_at)', [], (g, s) => {
    if (s.oldest_completed_at !== null) g.set(Math.max(0, (Date.now() - s.oldest_completed_at) / 1000));
  });
  historyGauge(
    'baton_history_retention_days',
    'Retention windows in days (kind: executions | audit; 0 keeps everything)',
    ['kind'],
    (g, s) => {
      g.set({ kind: 'executions' }, s.retention.days);
      g.set({ kind: 'audit' }, s.retention.audit_days);
    },
  );
  historyGauge('baton_history_last_prune_timestamp_seconds', 'When the last prune sweep completed (any process)', [], (g, s) => {
    if (s.last_prune.completed_at !== null) g.set(s.last_prune.completed_at / 1000);
  });
  historyGauge(
    'baton_history_last_prune_removed',
    'Rows the last prune sweep removed (kind: executions, with their events, logs and keys | audit)',
    ['kind'],
    (g, s) => {
      g.set({ kind: 'executions' }, s.last_prune.executions ?? 0);
      g.set({ kind: 'audit' }, s.last_prune.audit ?? 0);
    },
  );
  historyGauge(
    'baton_history_pruned_total',
    'Rows removed by the pruner since the database was created (kind: executions | audit)',
    ['kind'],
    (g, s) => {
      g.set({ kind: 'executions' }, s.last_prune.total_executions);
      g.set({ kind: 'audit' }, s.last_prune.total_audit);
    },
  );
  historyGauge('baton_history_last_prune_failed', '1 when the last prune sweep stopped on an error', [], (g, s) =>
    g.set(s.last_prune.error ? 1 : 0),
  );
}

/** The engine's events this node counts (admission waits, run durations, reaper and scheduler
 * actions, loop errors) and its HTTP answers; `off` stops listening. */
function countEngineEvents(registry: Registry, engine: Engine) {
  const admissionWait = new Histogram({
    name: 'baton_admission_wait_seconds',
    help: 'Queued → running wait of first deliveries admitted by this process (from max(queued_at, run_after))',
    labelNames: ['agent'] as const,
    buckets: WAIT_BUCKETS,
    registers: [registry],
  });
  const runDuration = new Histogram({
    name: 'baton_run_duration_seconds',
    help: 'Run duration of executions completed through this process, by outcome',
    labelNames: ['agent', 'status'] as const,
    buckets: WAIT_BUCKETS,
    registers: [registry],
  });
  const reaperActions = new Counter({
    name: 'baton_reaper_actions_total',
    help: "Rows this process's reaper acted on, by kind (requeued, requeued_shared, poisoned, timed_out, cancel_forced, cancelled, backlog_expired)",
    labelNames: ['kind'] as const,
    registers: [registry],
  });
  const schedulerTicks = new Counter({
    name: 'baton_scheduler_ticks_total',
    help: 'Due schedule ticks handled, by outcome (fired | skipped) and reason',
    labelNames: ['outcome', 'reason'] as const,
    registers: [registry],
  });
  const loopErrors = new Counter({
    name: 'baton_loop_errors_total',
    help: 'Failed background passes in this process, by loop (they run again on their next interval)',
    labelNames: ['loop'] as const,
    registers: [registry],
  });
  const httpDuration = new Histogram({
    name: 'baton_http_request_duration_seconds',
    help: 'HTTP requests answered, by method, route pattern and status code',
    labelNames: ['method', 'route', 'status_code'] as const,
    buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5, 30, 60],
    registers: [registry],
  });

  const onAdmitted = (
    rows: Array<{ agent: string; attempt: number; started_at: number | null; queued_at: number | null; run_after: number | null }>,
  ) => {
    for (const r of rows) {
      if (r.attempt !== 1 || r.started_at === null || r.queued_at === null) continue;
      const since = Math.max(Number(r.queued_at), Number(r.run_after ?? 0));
      admissionWait.observe({ agent: r.agent }, Math.max(0, Number(r.started_at) - since) / 1000);
    }
  };
  const onCompleted = (r: { agent: string; status: string; duration_ms: number | null }) => {
    if (r.duration_ms !== null) runDuration.observe({ agent: r.agent, status: r.status }, Number(r.duration_ms) / 1000);
  };
  const onReaped = (rows: Array<{ kind: string }>) => {
    for (const r of rows) reaperActions.inc({ kind: r.kind });
  };
  // One increment per outcome and batch rather than per row.
  const onFired = (fired: Fired[]) => {
    let queued = 0;
    const skipped = new Map<string, number>();
    for (const f of fired) {
      if (f.status === 'queued') queued++;
      else skipped.set(f.reason ?? '', (skipped.get(f.reason ?? '') ?? 0) + 1);
    }
    if (queued > 0) schedulerTicks.inc({ outcome: 'fired', reason: '' }, queued);
    for (const [reason, n] of skipped) schedulerTicks.inc({ outcome: 'skipped', reason }, n);
  };
  const onLoopError = ({ loop }: { loop: string }) => loopErrors.inc({ loop });
  engine.events.on('execution:admitted', onAdmitted);
  engine.events.on('execution:completed', onCompleted);
  engine.events.on('reaper:reaped', onReaped);
  engine.events.on('scheduler:fired', onFired);
  engine.events.on('loop:error', onLoopError);

  const off = () => {
    engine.events.off('execution:admitted', onAdmitted);
    engine.events.off('execution:completed', onCompleted);
    engine.events.off('reaper:reaped', onReaped);
    engine.events.off('scheduler:fired', onFired);
    engine.events.off('loop:error', onLoopError);
  };
  return { httpDuration, off };
}
