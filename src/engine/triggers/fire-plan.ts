/**
 * What a scheduler batch decides, as plain data in and out: no reads, no writes. The batch
 * (scheduler.ts) locks and reads the facts, asks here, and writes what comes back; so every
 * outcome of a due time — queued, or skipped as already_running, backlog_full or missed — and
 * every message and the batch's audit entry is decided in this one file and tested as a table
 * (test/triggers/fire-plan.test.ts).
 */
import type { SkipReason } from '../../domain/error-codes.ts';
import type { Fired } from '../../domain/outcomes.ts';
import type { AuditEntry } from '../audit.ts';
import type { AgentRow, NewExecution, ScheduleRow } from '../../store/schema.ts';
import { queuedValues, skippedValues } from '../transitions/create.ts';
import { compileCron, nextAfter } from './cron.ts';
import { rowFor, type RunSpec } from './start-run.ts';

/**
 * How late a tick may be handled and still count as on time, whatever the misfire policy.
 * Covers the loop's interval and jitter, a slow transaction or a GC pause; a tick later than
 * this was missed (a process was down), and the misfire policy decides.
 */
export const ON_TIME_MS = 30_000;
/** At most this many `missed` rows per schedule and pass (the most recent ones); older ones are counted. */
export const MISSED_ROWS_MAX = 20;
/**
 * Runs listed by name in a batch's audit entry; the rest are counted (`runs_omitted`). Nobody
 * acted, so the entry records what the batch did rather than one row per run (a batch is up to
 * 400 due times, and every run is its own execution row, with its schedule, for as long as it
 * is kept): about 100 bytes a run, so at most ~10 KiB an entry.
 */
export const AUDIT_RUNS_MAX = 100;
/** Due times walked per schedule and pass before giving up on listing them one by one. */
const MAX_DUE_WALK = 100_000;

/** One due schedule's due times from its next_run_at up to now. */
export interface DueTimes {
  /** The next_run_at to advance to (null: no further due time, or a cron that no longer compiles). */
  next: number | null;
  missed: number[];
  /** Missed due times older than the ones listed in `missed`. */
  earlier: number;
  toStart: number[];
}

export interface DueSchedule {
  s: ScheduleRow;
  times: DueTimes;
}

/**
 * Which due times from next_run_at up to now run, which were missed, and the next due time.
 * Due times handled at most ON_TIME_MS late all run; older ones were missed (the most recent
 * MISSED_ROWS_MAX are listed, the rest counted). With misfire policy run_once, when nothing is
 * on time, the most recent missed due time within the grace gets one catch-up run.
 */
export function planDueTimes(s: ScheduleRow, now: number): DueTimes {
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
  const catchUp =
    s.misfire_policy === 'run_once' && onTime.length === 0 && lastLate !== undefined && now - lastLate <= s.misfire_grace_seconds * 1000;
  return { next, missed: catchUp ? late.slice(0, -1) : late, earlier, toStart: catchUp ? [lastLate!] : onTime };
}

/**
 * The batch's due times, schedule by schedule. A schedule whose agent is gone starts nothing
 * (its next_run_at still advances, its last_run_at stays).
 */
export function dueTimesOf(due: ScheduleRow[], agents: ReadonlyMap<string, AgentRow>, now: number): DueSchedule[] {
  return due.map((s) => {
    const times = planDueTimes(s, now);
    if (!agents.has(s.agent)) times.toStart = [];
    return { s, times };
  });
}

/** What the batch read under its locks, and what it decided before. */
export interface BatchFacts {
  now: number;
  actor: string;
  /** In the order handled (by agent): earlier schedules take an agent's backlog room first. */
  due: DueSchedule[];
  /** The batch's agents, held for new work; a schedule whose agent is missing writes nothing. */
  agents: ReadonlyMap<string, AgentRow>;
  /** Queued executions per agent, counted under that hold (absent: none). */
  queued: ReadonlyMap<string, number>;
  /** For schedules with overlap policy skip: the run in flight (a running one rather than a queued one). */
  inFlight: ReadonlyMap<string, string>;
  /** Schedules whose next_run_at this batch advanced; the others were handled elsewhere and write nothing. */
  advanced: ReadonlySet<string>;
}

/** The batch's writes, in order: executions (queued or skipped), its one audit entry (null: it wrote nothing), and the pass's report. */
export interface FirePlan {
  rows: NewExecution[];
  audit: AuditEntry | null;
  fired: Fired[];
}

/**
 * One execution per due time: missed ones are recorded skipped; the ones to start are queued
 * unless a run of the schedule is in flight under overlap policy skip (skipped,
 * already_running) or the agent's backlog is full (skipped, backlog_full). Schedules of one
 * agent share its backlog room, and a run queued here counts as in flight for the schedule's
 * later due times.
 */
export function decideFiring(f: BatchFacts): FirePlan {
  const { now, actor } = f;
  const room = new Map<string, number>();
  for (const [name, row] of f.agents) room.set(name, row.max_backlog - (f.queued.get(name) ?? 0));
  const inFlight = new Map(f.inFlight);
  const rows: NewExecution[] = [];
  const fired: Fired[] = [];
  /** Missed due times too old to get a row of their own (see MISSED_ROWS_MAX). */
  let missedEarlier = 0;
  for (const { s, times } of f.due) {
    const agent = f.agents.get(s.agent);
    if (!f.advanced.has(s.id) || !agent) continue;

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
    const record = (at: number, code: SkipReason, why: string) => {
      const row = skippedValues(rowFor(agent, spec(at)), code, why, now, actor);
      rows.push(row);
      fired.push({ schedule_id: s.id, agent: s.agent, scheduled_for: at, execution_id: row.id, status: 'skipped', reason: code });
      return row.id;
    };
    for (const [i, at] of times.missed.entries()) {
      const more =
        i === 0 && times.earlier > 0 ? ` (and ${times.earlier} earlier due times since ${new Date(s.next_run_at!).toISOString()})` : '';
      const why = `due at ${new Date(at).toISOString()}, handled ${Math.round((now - at) / 1000)} s late: more than ${ON_TIME_MS / 1000} s late (a process was down?) and ${s.misfire_policy === 'skip' ? 'misfire policy skip' : `not the one catch-up run (misfire grace ${s.misfire_grace_seconds} s)`}${more}`;
      record(at, 'missed', why);
    }
    if (times.missed.length > 0) missedEarlier += times.earlier;
    for (const at of times.toStart) {
      const busy = s.overlap_policy === 'skip' ? inFlight.get(s.id) : undefined;
      if (busy) {
        record(at, 'already_running', `a run of this schedule is in flight (execution ${busy}); overlap policy skip`);
      } else if (room.get(agent.name)! <= 0) {
        record(at, 'backlog_full', `agent '${agent.name}' already has ${agent.max_backlog} queued executions (max_backlog)`);
      } else {
        const row = queuedValues(rowFor(agent, spec(at)), now, actor);
        rows.push(row);
        room.set(agent.name, room.get(agent.name)! - 1);
        if (s.overlap_policy === 'skip') inFlight.set(s.id, row.id);
        // A paused agent still gets its scheduled work (it waits in the queue); the record says so.
        const paused = agent.paused_at !== null ? { agent_paused: true as const } : {};
        fired.push({ schedule_id: s.id, agent: s.agent, scheduled_for: at, execution_id: row.id, status: 'queued', ...paused });
      }
    }
  }
  return { rows, audit: batchAudit(fired, missedEarlier, now, actor), fired };
}

/**
 * The batch's one audit entry: how many due times were queued and skipped (by reason), and the
 * first AUDIT_RUNS_MAX runs by schedule and execution id. Null when the batch wrote no row.
 */
export function batchAudit(fired: readonly Fired[], missedEarlier: number, now: number, actor: string): AuditEntry | null {
  if (fired.length === 0) return null;
  const skipped: Partial<Record<SkipReason, number>> = {};
  let queued = 0;
  let paused = 0;
  for (const f of fired) {
    if (f.status === 'queued') queued++;
    else skipped[f.reason!] = (skipped[f.reason!] ?? 0) + 1;
    if (f.agent_paused) paused++;
  }
  const runs = fired.slice(0, AUDIT_RUNS_MAX).map((f) => ({
    schedule_id: f.schedule_id,
    execution_id: f.execution_id,
    scheduled_for: f.scheduled_for,
    ...(f.status === 'queued' ? { status: f.status } : { status: f.status, reason: f.reason }),
    ...(f.agent_paused ? { agent_paused: true } : {}),
  }));
  return {
    at: now,
    actor,
    action: 'schedule.batch',
    subject: null,
    execution_id: null,
    detail: {
      queued,
      skipped,
      ...(missedEarlier > 0 ? { missed_earlier: missedEarlier } : {}),
      ...(paused > 0 ? { agent_paused: paused } : {}),
      runs,
      ...(fired.length > runs.length ? { runs_omitted: fired.length - runs.length } : {}),
    },
  };
}
