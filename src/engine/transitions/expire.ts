import { MAX_FORGIVEN_LAPSES, SHARED_LAPSE_THRESHOLD } from '../../domain/admission.ts';
import type { BatonErrorCode } from '../../domain/error-codes.ts';
import type { ReapKind, Reaped } from '../../domain/outcomes.ts';
import type { StoreAdapter, Tx } from '../../store/adapter.ts';
import type { ExecutionRow } from '../../store/schema.ts';
import type { AlertSinkKind } from '../../domain/canary.ts';
import { waitingSince } from '../backlog.ts';
import { countTowardBreakers } from '../breaker.ts';
import { accrueBudget } from '../budget.ts';
import { accruePoolBudgets, agentPoolsColumn } from '../pool-budget.ts';
import { setLapseHold } from './lapse.ts';
import { insertRetry } from './retry.ts';
import { RUNNING, stamp } from './stamp.ts';

export type { ReapKind, Reaped };

export interface ExpireOptions {
  now: number;
  actor: string;
  cancelGraceMs: number;
  backlogExpiryMs: number;
  batch: number;
  /** Where a circuit breaker change made here is alerted; default none. */
  alertSinks?: readonly AlertSinkKind[];
}

/**
 * One pass of the reaper's transitions, in one transaction. Rows are selected with
 * SKIP LOCKED, so several reapers (and concurrent completions) never fight over a row, and
 * every update re-checks the status and lease token it read.
 */
export async function expireOnce(tx: Tx, store: StoreAdapter, o: ExpireOptions): Promise<{ reaped: Reaped[]; finals: ExecutionRow[] }> {
  const out: Reaped[] = [];
  const finals: ExecutionRow[] = []; // ended with no retry to follow: the caller follows their outcomes
  await expireRunning(tx, store, o, out, finals);
  await expireStaleQueued(tx, store, o, out, finals);
  return { reaped: out, finals };
}

/** Running rows whose lease lapsed, deadline passed or cancellation grace ran out. */
async function expireRunning(tx: Tx, store: StoreAdapter, o: ExpireOptions, out: Reaped[], finals: ExecutionRow[]): Promise<void> {
  const running = await store
    .lockRows(
      tx
        .selectFrom('executions')
        .selectAll()
        .where('status', '=', RUNNING)
        .where((eb) =>
          eb.or([
            eb('lease_expires_at', '<', o.now),
            eb('deadline_at', '<', o.now),
            eb('cancel_requested_at', '<', o.now - o.cancelGraceMs),
          ]),
        )
        .limit(o.batch),
      'skip',
    )
    .execute();
  const decisions = new Map(running.map((row) => [row.id, decide(row, o)]));
  await forgiveSharedLapses(tx, running, decisions);

  const heldIds = new Map<string, string[]>();
  const ended: ExecutionRow[] = []; // timeouts and poisonings count toward the agent's breaker
  for (const row of running) {
    const decision = decisions.get(row.id)!;
    const done = await endRunning(tx, row, decision, o);
    if (!done) continue;
    if (decision.kind === 'requeued_shared') heldIds.set(row.agent, [...(heldIds.get(row.agent) ?? []), row.id]);
    ended.push(done);
    // A timeout or a poisoned task is a failure like any other: its retry commits with it.
    const retry = await insertRetry(tx, store, done, o.now, o.actor);
    if (done.completed_at !== null && !retry) finals.push(done);
    out.push({ id: row.id, agent: row.agent, kind: decision.kind, to: decision.to, ...(retry ? { retry_id: retry.id } : {}) });
  }
  for (const [agent, ids] of heldIds) await setLapseHold(tx, agent, ids, o.now, o.actor);
  await countTowardBreakers(tx, store, ended, o.now, o.actor, o.alertSinks ?? []);
  // Timed out, poisoned or force-cancelled runs used their run time: it counts toward a budget.
  for (const row of ended) {
    if (row.completed_at === null) continue;
    await accrueBudget(tx, row, o.now, o.alertSinks ?? []);
    await accruePoolBudgets(tx, row, o.now, await agentPoolsColumn(tx, row.agent));
  }
}

/**
 * Shared-cause lapses: when SHARED_LAPSE_THRESHOLD or more of one agent's leases lapsed (no
 * timeout, no cancellation: the worker just went away) in this transaction, its workers died
 * together. Those rows go back to the queue with the attempt their claim charged given back,
 * even one that would have been poisoned, up to MAX_FORGIVEN_LAPSES times per row, and the
 * agent is held until a worker of it is seen again (src/domain/admission.ts).
 */
async function forgiveSharedLapses(tx: Tx, running: readonly ExecutionRow[], decisions: Map<string, Decision>): Promise<void> {
  const lapsedBy = new Map<string, ExecutionRow[]>();
  for (const row of running) {
    const kind = decisions.get(row.id)!.kind;
    if (kind !== 'requeued' && kind !== 'poisoned') continue;
    lapsedBy.set(row.agent, [...(lapsedBy.get(row.agent) ?? []), row]);
  }
  // A lone lapse of an agent that is still held (no worker seen since its shared-cause lapse)
  // belongs to the same outage: a lease taken a little later, or split off by a pass boundary.
  const lone = [...lapsedBy].filter(([, rows]) => rows.length < SHARED_LAPSE_THRESHOLD).map(([agent]) => agent);
  const stillHeld = new Set(
    lone.length === 0
      ? []
      : (await tx.selectFrom('agents').select('name').where('name', 'in', lone).where('lapse_hold_at', 'is not', null).execute()).map(
          (a) => a.name,
        ),
  );
  for (const [agent, rows] of lapsedBy) {
    if (rows.length < SHARED_LAPSE_THRESHOLD && !stillHeld.has(agent)) continue;
    for (const row of rows) {
      if (row.lapses_forgiven < MAX_FORGIVEN_LAPSES) decisions.set(row.id, { kind: 'requeued_shared', to: 'queued' });
    }
  }
}

/** The guarded update of one running row to its decided end; undefined when the row moved meanwhile. */
function endRunning(tx: Tx, row: ExecutionRow, decision: Decision, o: ExpireOptions): Promise<ExecutionRow | undefined> {
  return tx
    .updateTable('executions')
    .set((eb) =>
      decision.kind === 'requeued_shared'
        ? {
            status: 'queued',
            lease_expires_at: null,
            deadline_at: null,
            attempt: eb('attempt', '-', 1),
            lapses_forgiven: eb('lapses_forgiven', '+', 1),
            ...stamp(o.now, o.actor, decision.kind),
          }
        : decision.to === 'queued'
          ? { status: 'queued', lease_expires_at: null, deadline_at: null, ...stamp(o.now, o.actor, decision.kind) }
          : {
              status: decision.to,
              completed_at: o.now,
              duration_ms: o.now - (row.started_at ?? o.now),
              lease_expires_at: null,
              error_code: decision.code,
              error_message: decision.message,
              ...stamp(o.now, o.actor, decision.kind),
            },
    )
    .where('id', '=', row.id)
    .where('status', '=', 'running')
    .where('lease_token', '=', row.lease_token)
    .returningAll()
    .executeTakeFirst();
}

/** Queued rows past the backlog expiry fail (backlog_expired). */
async function expireStaleQueued(tx: Tx, store: StoreAdapter, o: ExpireOptions, out: Reaped[], finals: ExecutionRow[]): Promise<void> {
  const stale = await store
    .lockRows(
      tx
        .selectFrom('executions')
        .selectAll()
        .where((eb) => waitingSince(eb, o.now - o.backlogExpiryMs))
        .limit(o.batch),
      'skip',
    )
    .execute();
  // In creation order whatever index the plan walked: the order decides which ending a group or
  // chain sees last, and must not differ between stores.
  stale.sort((x, y) => Number(x.created_at) - Number(y.created_at) || (x.id < y.id ? -1 : x.id > y.id ? 1 : 0));
  for (const row of stale) {
    const done = await tx
      .updateTable('executions')
      .set({
        status: 'failed',
        completed_at: o.now,
        duration_ms: row.started_at === null ? null : o.now - row.started_at,
        error_code: 'backlog_expired' satisfies BatonErrorCode,
        error_message: `queued for more than ${Math.round(o.backlogExpiryMs / 1000)} s without being admitted`,
        ...stamp(o.now, o.actor, 'backlog_expired'),
      })
      .where('id', '=', row.id)
      .where('status', '=', 'queued')
      .returningAll()
      .executeTakeFirst();
    if (!done) continue;
    out.push({ id: row.id, agent: row.agent, kind: 'backlog_expired', to: 'failed' });
    finals.push(done);
  }
}

type Decision =
  | { kind: 'requeued' | 'requeued_shared'; to: 'queued' }
  | {
      kind: Exclude<ReapKind, 'requeued' | 'requeued_shared' | 'backlog_expired'>;
      to: 'failed' | 'cancelled';
      code: BatonErrorCode;
      message: string;
    };

/** Which end a running row the reaper picked up deserves. Timeout and cancellation win over re-delivery. */
function decide(row: ExecutionRow, o: ExpireOptions): Decision {
  if (row.deadline_at !== null && row.deadline_at < o.now) {
    return { kind: 'timed_out', to: 'failed', code: 'timeout', message: `ran longer than its ${row.timeout_seconds} s timeout` };
  }
  if (row.cancel_requested_at !== null && row.cancel_requested_at < o.now - o.cancelGraceMs) {
    return {
      kind: 'cancel_forced',
      to: 'cancelled',
      code: 'cancel_forced',
      message: `worker did not stop within ${Math.round(o.cancelGraceMs / 1000)} s of the cancel request`,
    };
  }
  if (row.cancel_requested_at !== null) {
    return { kind: 'cancelled', to: 'cancelled', code: 'cancel_requested', message: 'lease lapsed after cancellation was requested' };
  }
  if (row.attempt > row.max_redeliveries) {
    const hb = row.heartbeat_at === null ? 'never' : new Date(row.heartbeat_at).toISOString();
    return {
      kind: 'poisoned',
      to: 'failed',
      code: 'poisoned',
      message: `lease lapsed on ${row.attempt} deliveries; last worker ${row.lease_owner}, last heartbeat ${hb}`,
    };
  }
  return { kind: 'requeued', to: 'queued' };
}
