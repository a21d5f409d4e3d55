import { lockAgentsForNewWork } from '../agent-lock.ts';
import { sql, type RawBuilder } from 'kysely';
import type { Tx } from '../../store/adapter.ts';
import type { AgentRow, NewExecution, ScheduleRow } from '../../store/schema.ts';
import { insertMany, queuedValues, skippedValues } from '../transitions/create.ts';
import { appendAudits, type AuditEntry } from '../audit.ts';
import { countSchedulerTick } from '../../metrics.ts';
import type { Engine } from '../engine.ts';
import { compileCron, nextAfter } from './cron.ts';
import { purgeExpiredKeys } from './idempotency.ts';
import { announce, rowFor, type RunSpec } from './start-run.ts';

/**
 * How late a tick may be handled and still count as on time, whatever the misfire policy.
 * Covers the loop's interval and jitter, a slow transaction or a GC pause; a tick later than
 * this was missed (a process was down), and the misfire policy decides.
 */
export const ON_TIME_MS = 30_000;
/**
 * How often every process runs a scheduler pass (±20 % jitter). It bounds fire lag for a
 * schedule due now (one interval, +20 %, at worst): 500 ms keeps p99 lag under the 1 s target;
 * the price is one cheap indexed query per process per pass when nothing is due.
 */
export const SCHEDULER_INTERVAL_MS = 500;
/** At most this many `missed` rows per schedule and pass (the most recent ones); older ones are counted. */
export const MISSED_ROWS_MAX = 20;
/** Due times walked per schedule and pass before giving up on listing them one by one. */
const MAX_DUE_WALK = 100_000;

export interface TickOptions {
  /** Epoch ms; default the engine's clock. */
  now?: number;
  /** Schedules per transaction. Default 200. */
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
  const batch = opts.batch ?? 200;
  const concurrency = Math.max(1, opts.concurrency ?? 2);
  const fired: Fired[] = [];
  const actor = `scheduler:${engine.nodeId}`;
  await purgeNow(engine, clock());
  // Most passes find nothing due: one indexed read, no write transaction (SQLite's is exclusive).
  const anyDue = await engine.store.db.selectFrom('schedules').select('id').where('enabled', '=', 1).where('next_run_at', '<=', clock()).limit(1).executeTakeFirst();
  if (!anyDue) return fired;
  for (;;) {
    let handled = 0;
    let emptyBatches = 0;
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        const out = await engine.store.transaction((tx) => fireBatch(tx, engine, clock(), batch, actor));
        handled += out.handled;
        if (out.handled === 0) emptyBatches++;
        fired.push(...out.fired);
      }),
    );
    if (handled === 0 || emptyBatches > 0) break;
  }
  for (const f of fired) {
    if (f.status === 'queued') announce(engine.store, { id: f.execution_id, agent: f.agent, status: 'queued' });
    countSchedulerTick(f.status === 'queued' ? 'fired' : 'skipped', f.reason ?? '');
  }
  if (fired.length > 0) engine.events.emit('scheduler:fired', fired);
  return fired;
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
        .orderBy('next_run_at')
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
    .where('status', '=', 'queued')
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
      .where('status', 'in', ['queued', 'running'])
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
  const moved = await advance(tx, plans, now);

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
  await insertMany(tx, rows);
  await appendAudits(tx, audits);
  return { handled: due.length, fired };
}

async function advance(tx: Tx, plans: Array<{ s: ScheduleRow; plan: Plan }>, now: number): Promise<Set<string>> {
  const big = (v: number | null) => sql`cast(${v} as bigint)`;
  const byId = (pick: (p: { s: ScheduleRow; plan: Plan }) => RawBuilder<unknown>, fallback: RawBuilder<unknown>) =>
    sql`case id ${sql.join(plans.map((p) => sql`when ${p.s.id} then ${pick(p)}`), sql` `)} else ${fallback} end`;
  const out = await tx
    .updateTable('schedules')
    .set({
      next_run_at: byId((p) => big(p.plan.next), sql`next_run_at`) as never,
      last_run_at: byId((p) => (p.plan.toStart.length > 0 ? big(p.plan.toStart[p.plan.toStart.length - 1]!) : sql`last_run_at`), sql`last_run_at`) as never,
      updated_at: now,
    })
    .where('id', 'in', plans.map((p) => p.s.id))
    .where(sql<boolean>`next_run_at = ${byId((p) => big(p.s.next_run_at), sql`null`)}`)
    .returning('id')
    .execute();
  return new Set(out.map((r) => r.id));
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
