import type { Kysely, SelectQueryBuilder } from 'kysely';
import { AHEAD_COUNT_CAP, describeWaiting, NO_WORKER_AFTER_MS, SEAT_HOLDERS_SHOWN, type WaitingView } from '../domain/admission.ts';
import type { StoreKind } from '../store/adapter.ts';
import type { AgentRow, DB, ExecutionRow } from '../store/schema.ts';
import { inIndexOrder } from './candidates.ts';
import { keyWaiting } from './flow-keys.ts';
import { admissionNow } from './holds.ts';
import { flowWaiting, poolView } from './pools.ts';
import { statusIs } from './status-sql.ts';
import { iso } from './views.ts';

type Queued = Pick<ExecutionRow, 'id' | 'agent' | 'priority' | 'queued_at' | 'started_at' | 'run_after' | 'serial_key'> &
  Partial<Pick<ExecutionRow, 'flow_key' | 'fair_round'>>;

/**
 * Why a queued execution is not running: the first reason in WAITING_REASONS order, with its
 * facts. Every read is a primary-key seek or walks a partial index of live rows
 * (executions_admission, executions_running, executions_serial_running) or seeks one row of the
 * agent's history by (agent, status, created_at); none of them grows with history
 * (test/cost/plans.test.ts checks the plans). It reads outside the admission transaction, so it is a
 * report of a moment, not a promise: a claim may admit the row right after.
 */
export async function waitingFor(
  db: Kysely<DB>,
  row: Queued,
  agent: AgentRow | undefined,
  now: number,
  backlogExpiryMs: number,
  kind: StoreKind,
): Promise<WaitingView | null> {
  if (!agent) return null; // the agent was deleted: its queued work is being cancelled
  // Admission order is (priority, fair_round, queued_at, id): count the rows before this one, up to the cap.
  const queuedAt = row.queued_at ?? 0;
  const round = Number(row.fair_round ?? 0);
  const aheadN = await countAhead(db, kind, row, queuedAt, round);
  const since = Math.max(Number(row.started_at ?? queuedAt), Number(row.run_after ?? 0));
  const base: Omit<WaitingView, 'summary' | 'reason'> = {
    ahead: Math.min(aheadN, AHEAD_COUNT_CAP),
    ahead_capped: aheadN > AHEAD_COUNT_CAP,
    // The reaper's rule (transitions/expire.ts): waiting since it was queued (or last started), or since run_after.
    backlog_expires_at: Number.isFinite(backlogExpiryMs) && backlogExpiryMs > 0 ? iso(since + backlogExpiryMs) : null,
    run_after: iso(row.run_after),
    paused: null,
    lapse: null,
    budget: null,
    breaker: null,
    serial: null,
    seats: null,
    key: null,
    last_claim_at: iso(agent.last_claim_at),
    push_error: null,
    throttle: null,
    pool: null,
  };
  const done = (w: Omit<WaitingView, 'summary'>): WaitingView => ({ ...w, summary: describeWaiting(w, now) });

  if (row.run_after !== null && Number(row.run_after) > now) return done({ ...base, reason: 'run_after' });

  // The holds as admission decides them (primary-key seeks: the budget's ledger, a half-open probe).
  const { hold } = await admissionNow(db, agent, now);
  if (hold?.reason === 'agent_paused')
    return done({ ...base, reason: hold.reason, paused: { by: hold.by, reason: hold.why, since: iso(hold.since)! } });
  if (hold?.reason === 'breaker_open')
    return done({ ...base, reason: hold.reason, breaker: { until: iso(hold.until), probe_id: hold.probe_id } });
  if (hold?.reason === 'lapse_hold') return done({ ...base, reason: hold.reason, lapse: { since: iso(hold.since)!, lapsed: hold.lapsed } });
  if (hold?.reason === 'budget_spent') {
    const { metric, window, limit, spent, resets_at } = hold.spent;
    return done({ ...base, reason: hold.reason, budget: { metric, window, limit, spent, resets_at: iso(resets_at)! } });
  }
  if (hold?.reason === 'pool_budget_spent') {
    const { metric, window, limit, spent, resets_at } = hold.spent;
    const budget = { metric, window, limit, spent, resets_at: iso(resets_at)! };
    return done({ ...base, reason: hold.reason, budget, pool: await poolView(db, hold.pool, now) });
  }

  if (row.serial_key !== null) {
    const busy = await db
      .selectFrom('executions')
      .select('id')
      .where('serial_key', '=', row.serial_key)
      .where('status', '=', statusIs('running'))
      .limit(1)
      .executeTakeFirst();
    if (busy) return done({ ...base, reason: 'serial_busy', serial: { serial_key: row.serial_key, execution_id: busy.id } });
  }

  const running = await db
    .selectFrom('executions')
    .select((eb) => eb.fn.countAll<number>().as('n'))
    .where('agent', '=', row.agent)
    .where('status', '=', statusIs('running'))
    .executeTakeFirstOrThrow();
  const runningN = Number(running.n);
  if (runningN >= agent.max_parallel) {
    const seats = await seatHolders(db, row.agent, agent.max_parallel, runningN, now);
    return done({ ...base, reason: 'seats_taken', seats });
  }
  const flow = await flowWaiting(db, agent, now);
  if (flow) return done({ ...base, ...flow });
  const keyed = await keyWaiting(db, agent, row.flow_key ?? null, now);
  if (keyed) return done({ ...base, ...keyed });

  if (agent.delivery === 'pull') {
    if (agent.last_claim_at === null || now - Number(agent.last_claim_at) > NO_WORKER_AFTER_MS)
      return done({ ...base, reason: 'no_worker' });
    return done({ ...base, reason: 'next_in_line' });
  }
  const pushError = await lastPushError(db, row.agent);
  if (pushError) return done({ ...base, reason: 'push_failing', push_error: pushError });
  return done({ ...base, reason: 'next_in_line' });
}

/**
 * The agent's latest failure, when it was a push delivery error and no success came after it.
 * Two one-row seeks into executions_agent_status_recent (agent, status, created_at DESC, id DESC).
 */
async function lastPushError(db: Kysely<DB>, agent: string): Promise<WaitingView['push_error']> {
  const latest = (status: 'failed' | 'succeeded') =>
    db
      .selectFrom('executions')
      .select(['id', 'created_at', 'completed_at', 'error_code', 'error_message'])
      .where('agent', '=', agent)
      .where('status', '=', statusIs(status))
      .orderBy('created_at', 'desc')
      .orderBy('id', 'desc')
      .limit(1)
      .executeTakeFirst();
  const failed = await latest('failed');
  if (!failed || !failed.error_code?.startsWith('push_')) return null;
  const ok = await latest('succeeded');
  if (ok && Number(ok.created_at) > Number(failed.created_at)) return null;
  return { execution_id: failed.id, code: failed.error_code, message: failed.error_message, at: iso(failed.completed_at) };
}

/**
 * Queued rows of the agent admitted before this one (priority, fair_round, queued_at, id), counted
 * up to the cap plus one. Three ranges of executions_admission, each bounded by its leading
 * columns: lower priorities; this priority, earlier rounds; this priority and round, before it by
 * (queued_at, id). (One row comparison over all four columns would say the same, but PostgreSQL
 * stops a range scan only on the comparison's first column: with one priority it read every queued
 * row of the agent. The last range keeps queued_at in its comparison: with `id <` alone, the other
 * columns fixed, the primary key delivers its order too, and a plan walked every execution with a
 * smaller id, history included.) Reads at most as many rows as it counts, plus one per range, and
 * the rest of its round's rows queued in the same millisecond. Each range is read in
 * admission order, and on PostgreSQL with no sorting plan (inIndexOrder, src/engine/candidates.ts):
 * only executions_admission delivers that order, so statistics of before a backlog grew, which make
 * PostgreSQL expect one queued row, cannot send a range through executions_status_recent.
 */
async function countAhead(db: Kysely<DB>, kind: StoreKind, row: Queued, queuedAt: number, round: number): Promise<number> {
  const count = async (q: Kysely<DB>) => {
    const queued = (i: number, where: (s: Range) => Range) =>
      q
        .selectFrom(
          where(q.selectFrom('executions').select('id').where('agent', '=', row.agent).where('status', '=', statusIs('queued')))
            .orderBy('priority')
            .orderBy('fair_round')
            .orderBy('queued_at')
            .orderBy('id')
            .limit(AHEAD_COUNT_CAP + 1)
            .as(`r${i}`),
        )
        .select('id');
    const same = (s: Range) => s.where('priority', '=', row.priority);
    const ranges = queued(0, (s) => same(s).where('fair_round', '<', round))
      .unionAll(
        queued(1, (s) =>
          same(s)
            .where('fair_round', '=', round)
            .where((eb) => eb(eb.refTuple('queued_at', 'id'), '<', eb.tuple(queuedAt, row.id))),
        ),
      )
      .unionAll(queued(2, (s) => s.where('priority', '<', row.priority)))
      .limit(AHEAD_COUNT_CAP + 1);
    const ahead = await q
      .selectFrom(ranges.as('a'))
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .executeTakeFirstOrThrow();
    return Number(ahead.n);
  };
  if (kind !== 'postgres') return count(db);
  return db.transaction().execute((tx) => inIndexOrder({ kind }, tx, () => count(tx)));
}
type Range = SelectQueryBuilder<DB, 'executions', { id: string }>;

/** The agent's seats when all are taken: the oldest holders first, a few of them. */
async function seatHolders(db: Kysely<DB>, agentName: string, maxParallel: number, runningN: number, now: number) {
  // Sorted here rather than in SQL: the running rows of one agent are few (its cap), and an
  // ORDER BY made SQLite sort them after a seek into a history index instead of the live one.
  const found = await db
    .selectFrom('executions')
    .select(['id', 'lease_owner', 'lease_expires_at', 'started_at'])
    .where('agent', '=', agentName)
    .where('status', '=', statusIs('running'))
    .limit(AHEAD_COUNT_CAP)
    .execute();
  const holders = found
    .sort((x, y) => Number(x.started_at ?? 0) - Number(y.started_at ?? 0) || (x.id < y.id ? -1 : 1))
    .slice(0, SEAT_HOLDERS_SHOWN);
  const seats = {
    max_parallel: maxParallel,
    running: runningN,
    holders: holders.map((h) => ({
      execution_id: h.id,
      lease_owner: h.lease_owner,
      lease_expires_at: iso(h.lease_expires_at),
      started_at: iso(h.started_at),
      running_seconds: h.started_at === null ? null : Math.max(0, Math.round((now - Number(h.started_at)) / 1000)),
    })),
  };
  return seats;
}
