import { lockAgentsForNewWork } from '../agent-lock.ts';
import { sql } from 'kysely';
import type { StoreAdapter, Tx } from '../../store/adapter.ts';
import type { AgentRow, NewExecution, ScheduleRow } from '../../store/schema.ts';
import { LIVE_STATUSES, statusIs } from '../status-sql.ts';
import { insertCreated, queuedValues, skippedValues } from '../transitions/create.ts';
import { announce } from '../announce.ts';
import { appendAudits, type AuditEntry } from '../audit.ts';
import { countSchedulerTick } from '../../metrics.ts';
import type { Engine } from '../engine.ts';
import { compileCron, nextAfter } from './cron.ts';
import { purgeExpiredKeys } from './idempotency.ts';
import { rowFor, type RunSpec } from './start-run.ts';

/**
 * How late a tick may be handled and still count as on time, whatever the misfire policy.
 * Covers the loop's interval and jitter, a slow transaction or a GC pause; a tick later than
 * this was missed (a process was down), and the misfire policy decides.
 */
export const ON_TIME_MS = 30_000;
/**
 * How often every process runs a scheduler pass at the least (±20 % jitter). A pass also wakes
 * at the next due time it saw (schedulerPass), so this bounds the lag only of a schedule that
 * another process (or an API call) made due sooner than that; the price is two cheap indexed
 * queries per process per pass when nothing is due.
 */
export const SCHEDULER_INTERVAL_MS = 500;
/** At most this many `missed` rows per schedule and pass (the most recent ones); older ones are counted. */
export const MISSED_ROWS_MAX = 20;
/** Due times walked per schedule and pass before giving up on listing them one by one. */
const MAX_DUE_WALK = 100_000;

export interface TickOptions {
  /** Epoch ms; default the engine's clock. */
  now?: number;
  /** Schedules per transaction. Default 400. */
  batch?: number;
  /** Transactions in flight at once. Default 2. */
  concurrency?: number;
}

export interface Fired {
  schedule_id: string;
  agent: string;
  scheduled_for: number;
  execution_id: string;
  status: 'queued' | 'skipped';
  reason?: 'already_running' | 'backlog_full' | 'missed';
}

/**
 * One scheduler pass: every enabled schedule whose `next_run_at` has come is handled exactly
 * once per due time, however many processes run this at once. Each batch is one transaction
 * that locks its schedules with SKIP LOCKED (other processes take other schedules), advances
 * `next_run_at` by compare-and-set, and writes one execution per due time — a queued run or a
 * `skipped` record — under the unique (schedule_id, scheduled_for) index. `next_run_at` is
 * advanced whatever the outcome.
 */
export async function tickSchedulesOnce(engine: Engine, opts: TickOptions = {}): Promise<Fired[]> {
  // Each batch reads the clock again, so rows carry the time they were really written.
  const clock = () => opts.now ?? engine.now();
  const batch = opts.batch ?? 400;
  const concurrency = Math.max(1, opts.concurrency ?? 2);
  const fired: Fired[] = [];
  const actor = `scheduler:${engine.nodeId}`;
  await purgeNow(engine, clock());
  // Most passes find nothing due: one indexed read, no write transaction (SQLite's is exclusive).
  const first = await nextDueAt(engine);
  if (first === undefined || first > clock()) return fired;
  for (;;) {
    let handled = 0;
    let emptyBatches = 0;
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        const out = await engine.store.transaction((tx) => fireBatch(tx, engine, clock(), batch, actor));
        handled += out.handled;
        if (out.handled === 0) emptyBatches++;
        // Committed: claimers hear of this batch now, not when the whole pass is done.
        announce(
          engine.store,
          out.fired.filter((f) => f.status === 'queued').map((f) => ({ id: f.execution_id, agent: f.agent, status: 'queued' })),
        );
        countFired(out.fired);
        fired.push(...out.fired);
      }),
    );
    if (handled === 0 || emptyBatches > 0) break;
  }
  if (fired.length > 0) engine.events.emit('scheduler:fired', fired);
  return fired;
}

/**
 * The scheduler loop's pass: fire what is due, then say when to look again. The loop wakes at
 * the next due time when that comes before its interval, so a schedule fires on time rather
 * than up to one interval late; the interval still bounds how long a schedule created or
 * changed by another process waits to be seen.
 */
export async function schedulerPass(engine: Engine): Promise<{ nextInMs?: number }> {
  await tickSchedulesOnce(engine);
  const next = await nextDueAt(engine);
  if (next === undefined) return {};
  // Still due after the pass: other processes hold those schedules (or a timer woke a hair
  // early); look again shortly rather than at once or a whole interval later.
  const inMs = next - engine.now();
  return { nextInMs: inMs > 0 ? inMs : STILL_DUE_RECHECK_MS };
}
const STILL_DUE_RECHECK_MS = 50;

/** The earliest next_run_at of an enabled schedule, if any (one read of the due index). */
async function nextDueAt(engine: Engine): Promise<number | undefined> {
  const row = await engine.store.db
    .selectFrom('schedules')
    .select('next_run_at')
    .where('enabled', '=', sql.lit(1))
    .where('next_run_at', 'is not', null)
    .orderBy('next_run_at')
    .limit(1)
    .executeTakeFirst();
  return row?.next_run_at ?? undefined;
}

/** Scheduler metrics, one increment per outcome and batch rather than per row. */
function countFired(fired: Fired[]): void {
  let queued = 0;
  const skipped = new Map<string, number>();
  for (const f of fired) {
    if (f.status === 'queued') queued++;
    else skipped.set(f.reason ?? '', (skipped.get(f.reason ?? '') ?? 0) + 1);
  }
  if (queued > 0) countSchedulerTick('fired', '', queued);
  for (const [reason, n] of skipped) countSchedulerTick('skipped', reason, n);
}

/** Housekeeping rides on the scheduler loop: forget idempotency keys past their expiry, once a minute. */
const lastPurge = new WeakMap<Engine, number>();
const PURGE_EVERY_MS = 60_000;
async function purgeNow(engine: Engine, now: number): Promise<void> {
  const last = lastPurge.get(engine);
  if (last !== undefined && now - last < PURGE_EVERY_MS && now >= last) return;
  lastPurge.set(engine, now);
  await purgeExpiredKeys(engine.store, now, 1000);
}

async function fireBatch(tx: Tx, engine: Engine, now: number, batch: number, actor: string): Promise<{ handled: number; fired: Fired[] }> {
  const due = await engine.store
    .lockRows(
      tx
        .selectFrom('schedules')
        .selectAll()
        .where('enabled', '=', 1)
        .where('next_run_at', '<=', now)
        // By agent within a due time: concurrent batches then mostly hold different agents
        // (each holds its agents' new-work turn until commit) instead of all waiting on all.
        .orderBy('next_run_at')
        .orderBy('agent')
        .limit(batch),
      'skip',
    )
    .execute();
  if (due.length === 0) return { handled: 0, fired: [] };
  // Agents are held in name order, so two passes never wait on each other in a cycle. Held,
  // each agent's backlog room is counted once for the whole batch (every creator of work takes
  // the same per-agent turn, and claims only lower the count, so it stays exact until commit).
  due.sort((a, b) => (a.agent < b.agent ? -1 : a.agent > b.agent ? 1 : 0));
  const names = [...new Set(due.map((s) => s.agent))];
  const locked = await lockAgentsForNewWork(tx, engine.store, names);
  const queued = await tx
    .selectFrom('executions')
    .select(['agent', (eb) => eb.fn.countAll<number>().as('n')])
    .where('agent', 'in', names)
    .where('status', '=', statusIs('queued'))
    .groupBy('agent')
    .execute();
  const queuedBy = new Map(queued.map((q) => [q.agent, Number(q.n)]));
  const agents = new Map<string, { row: AgentRow; room: number } | undefined>(locked.map((row) => [row.name, { row, room: row.max_backlog - (queuedBy.get(row.name) ?? 0) }]));
  // Runs in flight of the schedules whose overlap policy is skip (running ones first).
  const skipIds = due.filter((s) => s.overlap_policy === 'skip').map((s) => s.id);
  const inFlight = new Map<string, string>();
  if (skipIds.length > 0) {
    const open = await tx
      .selectFrom('executions')
      .select(['schedule_id', 'id'])
      .where('schedule_id', 'in', skipIds)
      .where('status', 'in', LIVE_STATUSES)
      .orderBy('status', 'asc') // 'queued' before 'running': the later write (running) wins below
      .execute();
    for (const r of open) inFlight.set(r.schedule_id!, r.id);
  }

  const plans = due.map((s) => {
    const plan = planDueTimes(s, now);
    if (!agents.get(s.agent)) plan.toStart = [];
    return { s, plan };
  });
  // Compare-and-set, one statement for the batch: only the holder of each exact next_run_at
  // advances it (the rows are locked too; the CAS is what makes a lost race write nothing).
  const moved = await advance(tx, engine.store, plans, now);

  const rows: NewExecution[] = [];
  const audits: AuditEntry[] = [];
  const fired: Fired[] = [];
  for (const { s, plan } of plans) {
    const agent = agents.get(s.agent);
    const toStart = plan.toStart;
    if (!moved.has(s.id) || !agent) continue;

    const spec = (scheduledFor: number): RunSpec => ({
      scheduleId: s.id,
      scheduledFor,
      webhookId: null,
      overlap: s.overlap_policy,
      trigger: 'schedule',
      origin: { schedule_id: s.id, scheduled_for: new Date(scheduledFor).toISOString() },
      message: s.message,
      payload: s.payload,
      priority: s.priority,
      retryPolicy: s.retry_policy,
      idempotencyKey: null,
    });
    const record = (at: number, code: 'already_running' | 'backlog_full' | 'missed', why: string) => {
      const row = skippedValues(rowFor(agent.row, spec(at)), code, why, now, actor);
      rows.push(row);
      fired.push({ schedule_id: s.id, agent: s.agent, scheduled_for: at, execution_id: row.id, status: 'skipped', reason: code });
      return row.id;
    };
    for (const [i, at] of plan.missed.entries()) {
      const more = i === 0 && plan.earlier > 0 ? ` (and ${plan.earlier} earlier due times since ${new Date(s.next_run_at!).toISOString()})` : '';
      const why = `due at ${new Date(at).toISOString()}, handled ${Math.round((now - at) / 1000)} s late: more than ${ON_TIME_MS / 1000} s late (a process was down?) and ${s.misfire_policy === 'skip' ? 'misfire policy skip' : `not the one catch-up run (misfire grace ${s.misfire_grace_seconds} s)`}${more}`;
      const id = record(at, 'missed', why);
      if (i === plan.missed.length - 1) audits.push({ at: now, actor, action: 'schedule.missed', subject: s.id, execution_id: id, detail: { missed: plan.missed.length + plan.earlier } });
    }
    for (const at of toStart) {
      const busy = s.overlap_policy === 'skip' ? inFlight.get(s.id) : undefined;
      if (busy) {
        const id = record(at, 'already_running', `a run of this schedule is in flight (execution ${busy}); overlap policy skip`);
        audits.push({ at: now, actor, action: 'schedule.skip', subject: s.id, execution_id: id, detail: { reason: 'already_running', running: busy } });
      } else if (agent.room <= 0) {
        const id = record(at, 'backlog_full', `agent '${agent.row.name}' already has ${agent.row.max_backlog} queued executions (max_backlog)`);
        audits.push({ at: now, actor, action: 'schedule.skip', subject: s.id, execution_id: id, detail: { reason: 'backlog_full' } });
      } else {
        const row = queuedValues(rowFor(agent.row, spec(at)), now, actor);
        rows.push(row);
        agent.room--;
        if (s.overlap_policy === 'skip') inFlight.set(s.id, row.id);
        audits.push({ at: now, actor, action: 'schedule.fire', subject: s.id, execution_id: row.id, detail: { trigger: 'schedule', scheduled_for: at } });
        fired.push({ schedule_id: s.id, agent: s.agent, scheduled_for: at, execution_id: row.id, status: 'queued' });
      }
    }
  }
  await insertCreated(tx, engine.store, rows);
  await appendAudits(engine.store, tx, audits);
  return { handled: due.length, fired };
}

async function advance(tx: Tx, store: StoreAdapter, plans: Array<{ s: ScheduleRow; plan: Plan }>, now: number): Promise<Set<string>> {
  // One row per schedule: its id, the next_run_at read, the new next_run_at and last_run_at,
  // sent as one JSON value (hundreds of rows per batch).
  const rows = JSON.stringify(plans.map(({ s, plan }) => ({ id: s.id, was: s.next_run_at, next: plan.next, last: plan.toStart[plan.toStart.length - 1] ?? null })));
  const out = await sql<{ id: string }>`
    with v as (
      select value->>'id' as sid, cast(value->>'was' as bigint) as was, cast(value->>'next' as bigint) as nxt, cast(value->>'last' as bigint) as lst
      from ${store.jsonElements(rows)}
    )
    update schedules set next_run_at = v.nxt, last_run_at = coalesce(v.lst, last_run_at), updated_at = ${now}
    from v where id = v.sid and next_run_at = v.was
    returning id`.execute(tx);
  return new Set(out.rows.map((r) => r.id));
}

interface Plan {
  next: number | null;
  missed: number[];
  /** Missed due times older than the ones listed in `missed`. */
  earlier: number;
  toStart: number[];
}

/**
 * Which due times from next_run_at up to now run, which were missed, and the next due time.
 * Due times handled at most ON_TIME_MS late all run; older ones were missed (the most recent
 * MISSED_ROWS_MAX are listed, the rest counted). With misfire policy run_once, when nothing is
 * on time, the most recent missed due time within the grace gets one catch-up run.
 */
function planDueTimes(s: ScheduleRow, now: number): Plan {
  let cron;
  try {
    cron = compileCron(s.cron, s.timezone);
  } catch {
    cron = undefined; // stored before a library change made it invalid: stop it, visibly
  }
  const onTime: number[] = [];
  const late: number[] = [];
  let earlier = 0;
  let t: number | null = s.next_run_at!;
  let walked = 0;
  while (t !== null && t <= now && walked < MAX_DUE_WALK) {
    if (now - t <= ON_TIME_MS) onTime.push(t);
    else {
      late.push(t);
      if (late.length > MISSED_ROWS_MAX) {
        late.shift();
        earlier++;
      }
    }
    walked++;
    t = cron ? nextAfter(cron, t) : null;
  }
  const next = t !== null && t <= now ? (cron ? nextAfter(cron, now) : null) : t;
  const lastLate = late[late.length - 1];
  const catchUp = s.misfire_policy === 'run_once' && onTime.length === 0 && lastLate !== undefined && now - lastLate <= s.misfire_grace_seconds * 1000;
  return { next, missed: catchUp ? late.slice(0, -1) : late, earlier, toStart: catchUp ? [lastLate!] : onTime };
}
