import { sql, type Kysely } from 'kysely';
import {
  ACTIVITY_WINDOWS,
  assignSeats,
  bucketSeries,
  SEAT_ROW_CAP,
  SERIES_BUCKETS,
  SERIES_ROW_CAP,
  type ActivityRow,
  type ActivityWindow,
  type SeriesBucket,
} from '../domain/activity.ts';
import type { DB } from '../store/schema.ts';
import { statusIs } from './status-sql.ts';

/**
 * Reads behind an agent's charts. Every statement is a seek whose rows are capped: finished runs
 * by executions_agent_finished (agent, completed_at …) from the window's start, newest first;
 * runs queued or running now by the live partial indexes executions_admission and
 * executions_running. Nothing reads the event log: queue depth and seats in use are the
 * intervals [queued_at, started_at) and [started_at, completed_at) of those rows, which are
 * exactly the runs that waited or ran inside the window (a run that finished before it did
 * neither). A re-delivered run (lease lapsed) shows its last wait and last seat only.
 */

const num = (v: number | string | null) => (v === null ? null : Number(v));

/** Runs of `agent` that finished at or after `from`, newest first, at most `cap`. */
function finishedSince(db: Kysely<DB>, agent: string, from: number, cap: number) {
  return db
    .selectFrom('executions')
    .select(['status', 'duration_ms', 'queued_at', 'started_at', 'completed_at'])
    .where('agent', '=', agent)
    .where('completed_at', 'is not', null)
    .where('completed_at', '>=', from)
    .orderBy('completed_at', 'desc')
    .limit(cap)
    .execute();
}

export interface AgentSeries {
  from: number;
  to: number;
  bucket_ms: number;
  /** Buckets that start before this are missing runs (the read was capped); null: complete. */
  complete_from: number | null;
  buckets: SeriesBucket[];
}

export async function readAgentSeries(db: Kysely<DB>, agent: string, window: ActivityWindow, now: number): Promise<AgentSeries> {
  const span = ACTIVITY_WINDOWS[window];
  const bucketMs = span / SERIES_BUCKETS;
  const from = now - span;
  const finished = await finishedSince(db, agent, from, SERIES_ROW_CAP);
  const running = await db
    .selectFrom('executions')
    .select(['status', 'duration_ms', 'queued_at', 'started_at', 'completed_at'])
    .where('agent', '=', agent)
    .where('status', '=', statusIs('running'))
    .limit(SERIES_ROW_CAP)
    .execute();
  // The longest-waiting first (the admission order), so a capped read keeps the waits that
  // reach furthest back.
  const queued = await db
    .selectFrom('executions')
    .select(['status', 'duration_ms', 'queued_at', 'started_at', 'completed_at'])
    .where('agent', '=', agent)
    .where('status', '=', statusIs('queued'))
    .orderBy('priority')
    .orderBy('fair_round')
    .orderBy('queued_at')
    .orderBy('id')
    .limit(SERIES_ROW_CAP)
    .execute();
  const rows: ActivityRow[] = [...finished, ...running, ...queued].map((r) => ({
    status: r.status,
    duration_ms: num(r.duration_ms),
    queued_at: num(r.queued_at),
    started_at: num(r.started_at),
    completed_at: num(r.completed_at),
  }));
  const capped = finished.length === SERIES_ROW_CAP || queued.length === SERIES_ROW_CAP;
  const oldest = finished.length > 0 ? Number(finished[finished.length - 1]!.completed_at) : now;
  const buckets = bucketSeries(rows, from, bucketMs, now);
  if (finished.length === SERIES_ROW_CAP) {
    // More finished than the rows read: count every bucket exactly instead.
    for (const c of await countFinished(db, agent, from, bucketMs)) {
      const b = buckets[Number(c.i)]!;
      b.succeeded = Number(c.succeeded ?? 0);
      b.failed = Number(c.failed ?? 0);
      b.other = Number(c.finished) - b.succeeded - b.failed;
    }
  }
  return { from, to: now, bucket_ms: bucketMs, complete_from: capped ? oldest : null, buckets };
}

/**
 * Runs finished per bucket and status, for an agent busier than SERIES_ROW_CAP: one statement,
 * one counting range seek per bucket in the covering index (no GROUP BY, so nothing is sorted),
 * returning SERIES_BUCKETS rows. Counting index entries is far cheaper than reading rows.
 */
export function countFinished(db: Kysely<DB>, agent: string, from: number, bucketMs: number) {
  const arm = (i: number) =>
    db
      .selectFrom('executions')
      .select((eb) => [
        sql.lit(i).as('i'),
        eb.fn.countAll<number>().as('finished'),
        eb.fn.sum<number | null>(eb.case().when('status', '=', statusIs('succeeded')).then(1).else(0).end()).as('succeeded'),
        eb.fn.sum<number | null>(eb.case().when('status', '=', statusIs('failed')).then(1).else(0).end()).as('failed'),
      ])
      .where('agent', '=', agent)
      .where('completed_at', 'is not', null)
      .where('completed_at', '>=', from + i * bucketMs)
      .where('completed_at', '<', from + (i + 1) * bucketMs);
  let q = arm(0);
  for (let i = 1; i < SERIES_BUCKETS; i++) q = q.unionAll(arm(i));
  return q.execute();
}

export interface SeatRow {
  id: string;
  status: string;
  attempt: number;
  owner: string | null;
  queued_at: number | null;
  started_at: number;
  ended_at: number | null;
  seat: number;
}

export interface AgentSeats {
  from: number;
  to: number;
  /** Most seats in use at once in the window (as far as the rows returned show). */
  seats_used: number;
  /** True when SEAT_ROW_CAP cut the runs or the waiting rows: the oldest are left out. */
  truncated: boolean;
  intervals: SeatRow[];
  /** Runs waiting now, longest-waiting first. */
  waiting: Array<{ id: string; queued_at: number | null; run_after: number | null }>;
}

export async function readAgentSeats(db: Kysely<DB>, agent: string, window: ActivityWindow, now: number): Promise<AgentSeats> {
  const from = now - ACTIVITY_WINDOWS[window];
  const cols = ['id', 'status', 'attempt', 'lease_owner', 'queued_at', 'started_at', 'completed_at'] as const;
  // The same seek as the series (a run that never started, e.g. cancelled while queued, held no
  // seat and is dropped here, after the read, so the index range stays the whole condition).
  const finished = await db
    .selectFrom('executions')
    .select(cols)
    .where('agent', '=', agent)
    .where('completed_at', 'is not', null)
    .where('completed_at', '>=', from)
    .orderBy('completed_at', 'desc')
    .limit(SEAT_ROW_CAP)
    .execute();
  const running = await db
    .selectFrom('executions')
    .select(cols)
    .where('agent', '=', agent)
    .where('status', '=', statusIs('running'))
    .limit(SEAT_ROW_CAP)
    .execute();
  const waiting = await db
    .selectFrom('executions')
    .select(['id', 'queued_at', 'run_after'])
    .where('agent', '=', agent)
    .where('status', '=', statusIs('queued'))
    .orderBy('priority')
    .orderBy('fair_round')
    .orderBy('queued_at')
    .orderBy('id')
    .limit(SEAT_ROW_CAP)
    .execute();
  const held = [...running, ...finished].filter((r) => r.started_at !== null);
  const intervals = held.map((r) => ({ id: r.id, started_at: Number(r.started_at), ended_at: num(r.completed_at) }));
  const seats = assignSeats(intervals, now);
  return {
    from,
    to: now,
    seats_used: seats.size === 0 ? 0 : Math.max(...seats.values()) + 1,
    truncated: finished.length === SEAT_ROW_CAP || waiting.length === SEAT_ROW_CAP,
    intervals: held.map((r) => ({
      id: r.id,
      status: r.status,
      attempt: r.attempt,
      owner: r.lease_owner,
      queued_at: num(r.queued_at),
      started_at: Number(r.started_at),
      ended_at: num(r.completed_at),
      seat: seats.get(r.id)!,
    })),
    waiting: waiting.map((w) => ({ id: w.id, queued_at: num(w.queued_at), run_after: num(w.run_after) })),
  };
}
