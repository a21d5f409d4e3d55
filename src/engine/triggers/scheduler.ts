import { lockAgentsForNewWork } from '../agent-lock.ts';
import { backlogs } from '../backlog.ts';
import { sql } from 'kysely';
import type { StoreAdapter, Tx } from '../../store/adapter.ts';
import type { ScheduleRow } from '../../store/schema.ts';
import { ENABLED, LIVE_STATUSES } from '../status-sql.ts';
import { createExecutions } from '../transitions/create.ts';
import { announce } from '../announce.ts';
import type { Engine } from '../engine.ts';
import type { Fired } from '../../domain/outcomes.ts';
import { decideFiring, dueTimesOf, type DueSchedule } from './fire-plan.ts';

/**
 * How often every process runs a scheduler pass at the least (±20 % jitter). A pass also wakes
 * at the next due time it saw (schedulerPass), so this bounds the lag only of a schedule that
 * another process (or an API call) made due sooner than that; the price is two cheap indexed
 * queries per process per pass when nothing is due.
 */
export const SCHEDULER_INTERVAL_MS = 500;

export interface TickOptions {
  /** Epoch ms; default the engine's clock. */
  now?: number;
  /** Schedules per transaction. Default 400. */
  batch?: number;
  /** Transactions in flight at once. Default 2. */
  concurrency?: number;
  /** Aborted when the process is stopping: the pass ends after the round of batches in hand; what is still due stays due. */
  stopping?: AbortSignal;
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
        // Per committed batch, so what listeners count (metrics) is what was written.
        if (out.fired.length > 0) engine.events.emit('scheduler:fired', out.fired);
        fired.push(...out.fired);
      }),
    );
    if (handled === 0 || emptyBatches > 0 || opts.stopping?.aborted) break;
  }
  return fired;
}

/**
 * The scheduler loop's pass: fire what is due, then say when to look again. The loop wakes at
 * the next due time when that comes before its interval, so a schedule fires on time rather
 * than up to one interval late; the interval still bounds how long a schedule created or
 * changed by another process waits to be seen.
 */
export async function schedulerPass(engine: Engine, stopping?: AbortSignal): Promise<{ nextInMs?: number }> {
  await tickSchedulesOnce(engine, { stopping });
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

/**
 * One batch, one transaction: lock the due schedules and their agents, read what the decision
 * needs, advance next_run_at, and write what fire-plan.ts decided (executions, then the batch's
 * audit entry). Each read and write is one statement for the whole batch (this is the hot path).
 */
async function fireBatch(tx: Tx, engine: Engine, now: number, batch: number, actor: string): Promise<{ handled: number; fired: Fired[] }> {
  const due = await lockDueSchedules(tx, engine.store, now, batch);
  if (due.length === 0) return { handled: 0, fired: [] };
  // Agents are held in name order, so two passes never wait on each other in a cycle. Held,
  // each agent's backlog room is counted once for the whole batch (every creator of work takes
  // the same per-agent turn, and claims only lower the count, so it stays exact until commit).
  due.sort((a, b) => (a.agent < b.agent ? -1 : a.agent > b.agent ? 1 : 0));
  const names = [...new Set(due.map((s) => s.agent))];
  const held = await lockAgentsForNewWork(tx, engine.store, names);
  const agents = new Map(held.map((row) => [row.name, row]));
  const queued = await backlogs(tx, names);
  const inFlight = await skipRunsInFlight(tx, due);
  const times = dueTimesOf(due, agents, now);
  // Compare-and-set, one statement for the batch: only the holder of each exact next_run_at
  // advances it (the rows are locked too; the CAS is what makes a lost race write nothing).
  const advanced = await advance(tx, engine.store, times, now);
  const plan = decideFiring({ now, actor, due: times, agents, queued, inFlight, advanced });
  await createExecutions(tx, engine.store, { backlog: 'counted', agents: held, rows: plan.rows, audit: { batch: plan.audit } });
  return { handled: due.length, fired: plan.fired };
}

/** The enabled schedules due by `now`, locked; those another process holds are skipped. */
function lockDueSchedules(tx: Tx, store: StoreAdapter, now: number, batch: number): Promise<ScheduleRow[]> {
  return store
    .lockRows(
      tx
        .selectFrom('schedules')
        .selectAll()
        .where('enabled', '=', ENABLED)
        .where('next_run_at', '<=', now)
        // By agent within a due time: concurrent batches then mostly hold different agents
        // (each holds its agents' new-work turn until commit) instead of all waiting on all.
        .orderBy('next_run_at')
        .orderBy('agent')
        .limit(batch),
      'skip',
    )
    .execute();
}

/** Runs in flight of the schedules whose overlap policy is skip (a running one rather than a queued one). */
async function skipRunsInFlight(tx: Tx, due: ScheduleRow[]): Promise<Map<string, string>> {
  const skipIds = due.filter((s) => s.overlap_policy === 'skip').map((s) => s.id);
  const inFlight = new Map<string, string>();
  if (skipIds.length === 0) return inFlight;
  const open = await tx
    .selectFrom('executions')
    .select(['schedule_id', 'id'])
    .where('schedule_id', 'in', skipIds)
    .where('status', 'in', LIVE_STATUSES)
    .orderBy('status', 'asc') // 'queued' before 'running': the later write (running) wins below
    .execute();
  for (const r of open) inFlight.set(r.schedule_id!, r.id);
  return inFlight;
}

async function advance(tx: Tx, store: StoreAdapter, due: DueSchedule[], now: number): Promise<Set<string>> {
  // One row per schedule: its id, the next_run_at read, the new next_run_at and last_run_at,
  // sent as one JSON value (hundreds of rows per batch).
  const rows = JSON.stringify(
    due.map(({ s, times }) => ({ id: s.id, was: s.next_run_at, next: times.next, last: times.toStart[times.toStart.length - 1] ?? null })),
  );
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
